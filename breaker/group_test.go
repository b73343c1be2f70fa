package breaker_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
)

func TestGroupMakesEachKeyOnceWithinItsLimit(t *testing.T) {
	var made atomic.Int64
	g := breaker.NewGroup(3, func(key string) *breaker.Breaker {
		made.Add(1)
		return breaker.New(key)
	})
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Go(func() {
			for i := range 100 {
				key := strconv.Itoa((i + n) % 5)
				if b, ok := g.Get(key); ok && b.Name() != key {
					t.Errorf("Get(%s) = the breaker of %s", key, b.Name())
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(3), made.Load(), "one breaker per key up to the limit")
	assert.Equal(t, 3, g.Len())
	in := 0
	for i := range 5 {
		b, ok := g.Get(strconv.Itoa(i))
		if ok {
			in++
			again, _ := g.Get(strconv.Itoa(i))
			assert.Same(t, b, again, "a key keeps its breaker")
		} else {
			assert.Nil(t, b)
		}
	}
	assert.Equal(t, 3, in, "past the limit a new key gets no breaker")
}

func TestGroupPastItsLimitMakesNothing(t *testing.T) {
	made := 0
	g := breaker.NewGroup(1, func(key int) *breaker.Breaker { made++; return breaker.New(strconv.Itoa(key)) })
	_, ok := g.Get(1)
	assert.True(t, ok)
	b, ok := g.Get(2)
	assert.False(t, ok)
	assert.Nil(t, b)
	assert.Equal(t, 1, made, "nothing made past the limit")
	assert.Equal(t, 1, g.Len())
}

func TestZeroGroupHoldsNothing(t *testing.T) {
	var g breaker.Group[string]
	b, ok := g.Get("a")
	assert.False(t, ok)
	assert.Nil(t, b)
	assert.Zero(t, g.Len())
}

func TestNewGroupPanicsOnNonsense(t *testing.T) {
	newBreaker := func(key string) *breaker.Breaker { return breaker.New(key) }
	for _, tc := range []struct {
		name  string
		limit int
		fn    func(string) *breaker.Breaker
		want  string
	}{
		{name: "no limit", limit: 0, fn: newBreaker, want: "breaker: NewGroup(0): limit must be 1 or more"},
		{name: "a negative limit", limit: -1, fn: newBreaker, want: "breaker: NewGroup(-1): limit must be 1 or more"},
		{name: "no newBreaker", limit: 1, want: "breaker: NewGroup: newBreaker is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, func() { breaker.NewGroup(tc.limit, tc.fn) })
		})
	}
}

func TestGroupGetOfAKnownKeyAllocatesNothing(t *testing.T) {
	g := breaker.NewGroup(10, func(key string) *breaker.Breaker { return breaker.New(key) })
	key := fmt.Sprint("api.example.com:", 443)
	g.Get(key)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { g.Get(key) }))
}

// BenchmarkGroupGet is the lookup of a known key, beside a plain map read
// under a read lock as the baseline.
func BenchmarkGroupGet(b *testing.B) {
	key := "https://api.example.com:443"
	b.Run("Group", func(b *testing.B) {
		g := breaker.NewGroup(1024, func(key string) *breaker.Breaker { return breaker.New(key) })
		g.Get(key)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Get(key)
			}
		})
	})
	b.Run("RWMutex map", func(b *testing.B) {
		var mu sync.RWMutex
		m := map[string]*breaker.Breaker{key: breaker.New(key)}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.RLock()
				_ = m[key]
				mu.RUnlock()
			}
		})
	})
}
