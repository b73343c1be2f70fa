package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errOverloaded = errors.New("503")

func TestAIMDFallsOnFailuresAndClimbsWhenUsed(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(10), limit.Min(2), limit.Max(12))
	ctx := t.Context()
	for range 2 { // slow start: a full limit climbs by one an attempt
		for range 10 {
			require.NoError(t, l.Acquire(ctx))
		}
		for range 10 {
			l.Release(nil)
		}
	}
	assert.Equal(t, 12, l.Limit(), "10 + 10, up to Max")

	for range 50 { // failures: 12 * 0.9^n, down to Min
		require.NoError(t, l.Acquire(ctx))
		l.Release(errOverloaded)
	}
	assert.Equal(t, 2, l.Limit())

	for range 3 { // after a failure, a full limit climbs by one over the limit an attempt
		for range 2 {
			require.NoError(t, l.Acquire(ctx))
		}
		l.Release(nil)
		l.Release(nil)
	}
	assert.Equal(t, 3, l.Limit(), "2 + 1/2 + 1/2.5 + ... is 3 after 6 attempts")

	for range 100 { // one in flight of 3 is not using it: it stays
		require.NoError(t, l.Acquire(ctx))
		l.Release(nil)
	}
	assert.Equal(t, 3, l.Limit())

	for range 100 { // a full limit climbs to Max, no further
		for range l.Limit() {
			require.NoError(t, l.Acquire(ctx))
		}
		for range l.InFlight() {
			l.Release(nil)
		}
	}
	assert.Equal(t, 12, l.Limit())

	for range 10 { // a caller's error or cancellation moves nothing down
		require.NoError(t, l.Acquire(ctx))
		l.Release(resilience.Permanent(errOverloaded))
		require.NoError(t, l.Acquire(ctx))
		l.Release(context.Canceled)
	}
	assert.Equal(t, 12, l.Limit())
}

func TestWaitersAreServedInOrderWithinTheirDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(3))
		require.NoError(t, l.Acquire(t.Context()))
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(100+i*100)*time.Millisecond)
				defer cancel()
				err := l.Acquire(ctx)
				mu.Lock()
				if err == nil {
					order = append(order, i)
				} else {
					assert.ErrorIs(t, err, limit.ErrLimited)
					order = append(order, -i)
				}
				mu.Unlock()
				if err == nil {
					time.Sleep(120 * time.Millisecond)
					l.Release(nil)
				}
			})
		}
		time.Sleep(10 * time.Millisecond)
		assert.ErrorIs(t, l.Acquire(t.Context()), limit.ErrLimited, "a fourth waiter is refused at once")
		time.Sleep(140 * time.Millisecond) // waiter 0's deadline at 100 ms has passed
		l.Release(nil)
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2}[1:], order[1:], "1 then 2, in order")
		assert.Equal(t, 0, order[0], "waiter 0 gave up at its deadline")
		assert.Zero(t, l.InFlight())
	})
}

// TestNoSlotIsLostUnderContention: many goroutines acquiring, some with
// contexts that end at any moment, leave every slot free at the end.
func TestNoSlotIsLostUnderContention(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(4), limit.Max(8), limit.MaxWaiting(16))
	var most, inFlight atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for j := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((i+j)%5)*50*time.Microsecond)
				if l.Acquire(ctx) == nil {
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					inFlight.Add(-1)
					var err error
					if j%7 == 0 {
						err = errOverloaded
					}
					l.Release(err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, l.InFlight())
	assert.LessOrEqual(t, most.Load(), int64(8))
}

func TestNilLimiterAdmitsEverything(t *testing.T) {
	var l *limit.Limiter
	assert.NoError(t, l.Acquire(t.Context()))
	l.Release(nil)
	assert.Equal(t, math.MaxInt, l.Limit())
}

func TestLimiterCostsNoAllocation(t *testing.T) {
	l := limit.NewAIMD()
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		_ = l.Acquire(ctx)
		l.Release(nil)
	}))
}

func TestNonsenseOptionsPanic(t *testing.T) {
	assert.PanicsWithValue(t, "limit: NewFixed(0): n must be at least 1", func() { limit.NewFixed(0) })
	for _, f := range []float64{0, 0.4, 1, math.NaN()} {
		assert.PanicsWithValue(t, fmt.Sprintf("limit: Backoff(%v): f must be in [0.5, 1)", f), func() { limit.Backoff(f) })
	}
	assert.PanicsWithValue(t, "limit: MaxWaiting(-1): n must be 0 or more", func() { limit.MaxWaiting(-1) })
	assert.PanicsWithValue(t, "limit: Min(0): must be at least 1", func() { limit.Min(0) })
	assert.PanicsWithValue(t, "limit: NewAIMD: need Min (30) <= Initial (20) <= Max (1000)", func() { limit.NewAIMD(limit.Min(30)) })
}

func TestNewFixedRefusesTheOptionsOfAnAdaptiveLimiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []limit.Option
		want string // the panic; "" for none
	}{
		{name: "Initial", opts: []limit.Option{limit.Initial(5)}, want: "limit: NewFixed: option Initial applies only to NewAIMD"},
		{name: "Min", opts: []limit.Option{limit.Min(2)}, want: "limit: NewFixed: option Min applies only to NewAIMD"},
		{name: "Max", opts: []limit.Option{limit.Max(50)}, want: "limit: NewFixed: option Max applies only to NewAIMD"},
		{name: "Backoff", opts: []limit.Option{limit.Backoff(0.5)}, want: "limit: NewFixed: option Backoff applies only to NewAIMD"},
		{name: "the first of several", opts: []limit.Option{limit.MaxWaiting(1), limit.Max(50), limit.Initial(5)},
			want: "limit: NewFixed: option Max applies only to NewAIMD"},
		{name: "MaxWaiting", opts: []limit.Option{limit.MaxWaiting(3)}},
		{name: "nil", opts: []limit.Option{nil}},
		{name: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want != "" {
				assert.PanicsWithValue(t, tc.want, func() { limit.NewFixed(2, tc.opts...) })
				assert.NotPanics(t, func() { limit.NewAIMD(tc.opts...) }, "NewAIMD takes it")
				return
			}
			l := limit.NewFixed(2, tc.opts...)
			assert.Equal(t, 2, l.Limit())
		})
	}
}

func BenchmarkLimiter(b *testing.B) {
	l := limit.NewAIMD(limit.Initial(1000))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l.Acquire(ctx) == nil {
				l.Release(nil)
			}
		}
	})
}
