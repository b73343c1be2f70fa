package pipeline

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// TestRacePoolsOnePerResultType: the races of one result type share a
// pool, those of another have their own.
func TestRacePoolsOnePerResultType(t *testing.T) {
	var ts hedgeTimers
	ints, strs := poolOf[int](&ts), poolOf[string](&ts)
	assert.NotSame(t, ints, strs)
	assert.Same(t, ints, poolOf[int](&ts))
	assert.Same(t, strs, poolOf[string](&ts))
	type myInt int // the shape of int, another type
	assert.NotSame(t, ints, poolOf[myInt](&ts))
	assert.IsType(t, (*race[string])(nil), strs.Get())
	assert.IsType(t, (*race[myInt])(nil), poolOf[myInt](&ts).Get())
}

// TestFirstAttemptContextOutlivesItsRace: the context of a race's first
// attempt, which the operation may keep, stays canceled after the call,
// while later calls reuse the race's memory.
func TestFirstAttemptContextOutlivesItsRace(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	var kept []context.Context
	for range 100 {
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			kept = append(kept, ctx)
			return 1, nil
		})
		require.NoError(t, err)
	}
	for i, ctx := range kept {
		require.ErrorIs(t, ctx.Err(), context.Canceled, "call %d", i)
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("call %d: the context kept is not done", i)
		}
	}
}

// TestHedgesNeverEarlyWhileRacesAreReused: races whose hedge comes due
// as their first attempt answers, from many goroutines, in real time: a
// race that the timer fires is not reused by the next call meanwhile,
// which would send that call's hedge at once, before its delay.
func TestHedgesNeverEarlyWhileRacesAreReused(t *testing.T) {
	const delay = 300 * time.Microsecond
	p := New(WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxShare(1), hedge.MaxExtra(2))))
	type key struct{}
	var early, hedges atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				began := time.Now()
				ctx := context.WithValue(context.Background(), key{}, began)
				_, _ = Do(ctx, p, func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedges.Add(1)
						if time.Since(ctx.Value(key{}).(time.Time)) < delay {
							early.Add(1)
						}
						return 2, nil
					}
					if (g+i)%3 == 0 {
						time.Sleep(delay - 50*time.Microsecond + time.Duration(i%4)*50*time.Microsecond)
					}
					return 1, nil
				})
			}
		})
	}
	wg.Wait()
	assert.Zero(t, early.Load(), "hedges sent before their delay, of %d", hedges.Load())
}

// TestRaceLeftToItsPoolAsNew: a race that answered before its hedge was
// due is left to its pool as a new one, but for the fields the next race
// sets.
func TestRaceLeftToItsPoolAsNew(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	pool := poolOf[int](p.cfg.hedgeTimers)
	for range 10 {
		_, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
		r := pool.Get().(*race[int])
		if r.pool == nil {
			continue // a new one: the pool lost the race to a collection, or to another P
		}
		r.c, r.ctx, r.delay, r.extra, r.first, r.pool = call[int]{}, nil, 0, 0, nil, nil
		r.due.shard = 0 // dealt as the race was made
		require.True(t, reflect.ValueOf(r).Elem().IsZero(), "%+v", r)
		return
	}
	t.Fatal("no race left to the pool")
}
