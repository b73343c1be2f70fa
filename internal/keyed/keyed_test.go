package keyed

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func TestGetMakesEachKeyOnceWithinTheLimit(t *testing.T) {
	var m Map[string, int]
	var made atomic.Int64
	newValue := func(k string) int { made.Add(1); n, _ := strconv.Atoi(k); return n * 10 }
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				k := strconv.Itoa((i + g) % 5)
				v, ok := m.Get(k, 3, newValue)
				n, _ := strconv.Atoi(k)
				if ok && v != n*10 {
					t.Errorf("Get(%s) = %d", k, v)
				}
			}
		}()
	}
	wg.Wait()
	if got := made.Load(); got != 3 {
		t.Errorf("made %d values, want 3: one per key up to the limit", got)
	}
	if m.Len() != 3 {
		t.Errorf("Len() = %d, want 3", m.Len())
	}
}

func TestZeroMapAndPastTheLimit(t *testing.T) {
	var m Map[int, string]
	if v, ok := m.Get(1, 0, func(int) string { t.Fatal("made past the limit"); return "" }); ok || v != "" {
		t.Errorf("Get past the limit = %q, %v", v, ok)
	}
	if m.Len() != 0 {
		t.Errorf("Len() = %d", m.Len())
	}
}

func BenchmarkGetHit(b *testing.B) {
	var m Map[string, int]
	m.Get("k", 1, func(string) int { return 1 })
	b.ReportAllocs()
	for b.Loop() {
		m.Get("k", 1, func(string) int { return 1 })
	}
}
