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
	for range 2 { // slow start: a full limit climbs by one an attempt
		var tks []limit.Ticket
		for range 10 {
			tks = append(tks, acquire(t, l))
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
	}
	assert.Equal(t, 12, l.Limit(), "10 + 10, up to Max")

	for range 50 { // failures one after the other: 12 * 0.9^n, down to Min
		l.Release(acquire(t, l), errOverloaded)
	}
	assert.Equal(t, 2, l.Limit())

	for range 3 { // after a failure, a full limit climbs by one over the limit an attempt
		a, b := acquire(t, l), acquire(t, l)
		l.Release(a, nil)
		l.Release(b, nil)
	}
	// Each of the 6 was in flight as the limit was in use (2 of 2, 2 of
	// 2.9, ...), the second of each pair too, though it ended alone: 2 +
	// 1/2 + 1/2.5 + 1/2.9 + ... is 4.1 (3.x, 4 let in, when an attempt
	// counted only if the limit was in use as it ended: review150).
	assert.Equal(t, 5, l.Limit(), "2 + 1/2 + 1/2.5 + ... is 4.1 after 6 attempts: 5 let in")

	for range 100 { // one in flight of 4.x is not using it: it stays
		l.Release(acquire(t, l), nil)
	}
	assert.Equal(t, 5, l.Limit())

	for range 100 { // a full limit climbs to Max, no further
		var tks []limit.Ticket
		for range l.Limit() {
			tks = append(tks, acquire(t, l))
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
	}
	assert.Equal(t, 12, l.Limit())

	for range 10 { // a caller's error or cancellation moves nothing down
		l.Release(acquire(t, l), resilience.Permanent(errOverloaded))
		l.Release(acquire(t, l), context.Canceled)
	}
	assert.Equal(t, 12, l.Limit())
}

// acquire takes a slot that must be free.
func acquire(t *testing.T, l *limit.Limiter) limit.Ticket {
	t.Helper()
	tk, err := l.Acquire(t.Context())
	require.NoError(t, err)
	require.NotZero(t, tk)
	return tk
}

// TestABurstOfFailuresDecreasesOnce: 60 attempts sent together that all
// time out are one congestion, as TCP counts the losses of one window:
// the limit falls by one step, not sixty, and the next failure, of an
// attempt sent after that step, takes another.
func TestABurstOfFailuresDecreasesOnce(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(100), limit.Max(100))
	var tks []limit.Ticket
	for range 60 {
		tks = append(tks, acquire(t, l))
	}
	for _, tk := range tks {
		l.Release(tk, context.DeadlineExceeded)
	}
	assert.Equal(t, 90, l.Limit(), "one step of 0.9, not 100 * 0.9^60")
	l.Release(acquire(t, l), context.DeadlineExceeded)
	assert.Equal(t, 81, l.Limit(), "an attempt sent after the step is a new congestion")
}

// TestWaitersOrder: a free slot goes to the oldest waiter, with a
// deadline or without; once the oldest has waited four times as long as
// it has left (it is late), to the newest, or with OldestOnTime to the
// oldest that is not late, and with every waiter late, to the newest. A
// waiter whose deadline passes gives up.
func TestWaitersOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		oldest    bool            // OldestOnTime
		timeouts  []time.Duration // of the waiters, which come 1 ms apart; 0: none
		releaseAt time.Duration
		want      []int // who got a slot, in order; -1-i: waiter i gave up
	}{
		{"first come first served", false, []time.Duration{time.Second, 0, 300 * time.Millisecond}, 10 * time.Millisecond, []int{0, 1, 2}},
		{"the oldest is late: the newest, without a deadline", false, []time.Duration{100 * time.Millisecond, time.Second, 0}, 85 * time.Millisecond, []int{2, -1, 1}},
		{"the oldest is late: the newest, with one", false, []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second}, 85 * time.Millisecond, []int{2, -1, 1}},
		{"OldestOnTime: first come first served", true, []time.Duration{time.Second, 0, 300 * time.Millisecond}, 10 * time.Millisecond, []int{0, 1, 2}},
		{"OldestOnTime: the oldest is late: the next on time", true, []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second}, 85 * time.Millisecond, []int{1, -1, 2}},
		{"OldestOnTime: the oldest is late: the next on time, without a deadline", true, []time.Duration{100 * time.Millisecond, 0, time.Second}, 85 * time.Millisecond, []int{1, -1, 2}},
		{"OldestOnTime: the two oldest are late: the third", true, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, time.Second}, 85 * time.Millisecond, []int{2, -1, -2}},
		{"OldestOnTime: all are late: the newest", true, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 104 * time.Millisecond}, 85 * time.Millisecond, []int{2, -1, -2}},
		{"OldestOnTime: all are late: the newest, then the newest left", true, []time.Duration{100 * time.Millisecond, 105 * time.Millisecond, 104 * time.Millisecond}, 85 * time.Millisecond, []int{2, -1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []limit.Option{limit.MaxWaiting(len(tc.timeouts))}
				if tc.oldest {
					opts = append(opts, limit.OldestOnTime())
				}
				l := limit.NewFixed(1, opts...)
				first := acquire(t, l)
				var order []int
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i, d := range tc.timeouts {
					wg.Go(func() {
						time.Sleep(time.Duration(i) * time.Millisecond)
						ctx, cancel := t.Context(), context.CancelFunc(func() {})
						if d > 0 {
							ctx, cancel = context.WithTimeout(ctx, d)
						}
						defer cancel()
						tk, err := l.Acquire(ctx)
						mu.Lock()
						if err == nil {
							order = append(order, i)
						} else {
							assert.ErrorIs(t, err, limit.ErrLimited)
							order = append(order, -1-i)
						}
						mu.Unlock()
						if err == nil {
							time.Sleep(20 * time.Millisecond)
							l.Release(tk, nil)
						}
					})
				}
				time.Sleep(tc.releaseAt)
				l.Release(first, nil)
				wg.Wait()
				assert.Equal(t, tc.want, order)
				assert.Zero(t, l.InFlight())
			})
		})
	}
}

// TestTheQueuesBoundRefusesAtOnce: a waiter past MaxWaiting is refused at
// once.
func TestTheQueuesBoundRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(1))
		first := acquire(t, l)
		go func() { _, _ = l.Acquire(t.Context()) }()
		synctest.Wait()
		_, err := l.Acquire(t.Context())
		assert.ErrorIs(t, err, limit.ErrLimited)
		l.Release(first, nil)
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
				if tk, err := l.Acquire(ctx); err == nil {
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					inFlight.Add(-1)
					var err error
					if j%7 == 0 {
						err = errOverloaded
					}
					l.Release(tk, err)
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
	tk, err := l.Acquire(t.Context())
	assert.NoError(t, err)
	l.Release(tk, nil)
	assert.Equal(t, math.MaxInt, l.Limit())
}

func TestLimiterCostsNoAllocation(t *testing.T) {
	l := limit.NewAIMD()
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		tk, _ := l.Acquire(ctx)
		l.Release(tk, nil)
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
			if tk, err := l.Acquire(ctx); err == nil {
				l.Release(tk, nil)
			}
		}
	})
}

// TestOptionsAtTheirBounds: the smallest values each option takes are
// taken.
func TestOptionsAtTheirBounds(t *testing.T) {
	assert.Equal(t, 1, limit.NewFixed(1).Limit())
	assert.Equal(t, 5, limit.NewAIMD(limit.Min(5), limit.Initial(5), limit.Max(5)).Limit(), "Min = Initial = Max")
	assert.Equal(t, 1, limit.NewAIMD(limit.Min(1), limit.Initial(1)).Limit())
	l := limit.NewFixed(1, limit.MaxWaiting(0))
	acquire(t, l)
	_, err := l.Acquire(t.Context())
	assert.ErrorIs(t, err, limit.ErrLimited, "MaxWaiting(0): none waits")
	assert.PanicsWithValue(t, "limit: Initial(0): must be at least 1", func() { limit.Initial(0) })
	assert.PanicsWithValue(t, "limit: Max(0): must be at least 1", func() { limit.Max(0) })
	assert.PanicsWithValue(t, "limit: NewAIMD: need Min (1) <= Initial (20) <= Max (19)", func() { limit.NewAIMD(limit.Max(19)) })
}

// TestAWaiterGrantedAfterADecreaseIsANewRound: an attempt that waited for
// its slot is sent when it gets it, after the decrease that freed the
// slot: its failure is a new congestion.
func TestAWaiterGrantedAfterADecreaseIsANewRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(20), limit.MaxWaiting(1))
		var tks []limit.Ticket
		for range 20 {
			tks = append(tks, acquire(t, l))
		}
		granted := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(t.Context())
			assert.NoError(t, err)
			granted <- tk
		}()
		synctest.Wait() // it waits
		assert.Equal(t, 1, l.Waiting())
		l.Release(tks[0], errOverloaded) // 20 -> 18
		assert.Equal(t, 18, l.Limit())
		l.Release(tks[1], nil)
		l.Release(tks[2], nil) // 17 in flight, under 18.x: the waiter gets a slot
		tk := <-granted
		assert.Zero(t, l.Waiting())
		l.Release(tks[3], errOverloaded) // sent before the decrease: the same congestion
		assert.Equal(t, 19, l.Limit(), "18.x")
		l.Release(tk, errOverloaded) // sent after it: a new one
		assert.Equal(t, 17, l.Limit(), "18.x * 0.9 = 16.x")
		for _, tk := range tks[4:] {
			l.Release(tk, nil)
		}
	})
}

func TestNilLimiterCountsNothing(t *testing.T) {
	var l *limit.Limiter
	assert.Zero(t, l.Waiting())
	assert.Zero(t, l.InFlight())
}

// TestEnterTakesASlotPastTheLimit: Enter never waits or refuses, but its
// slot counts: the attempts that wait go only once it is given back, and
// its outcome moves an adaptive limit.
func TestEnterTakesASlotPastTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(2), limit.Max(2), limit.MaxWaiting(10))
		a, b := acquire(t, l), acquire(t, l)
		c := l.Enter()
		require.NotZero(t, c)
		assert.Equal(t, 3, l.InFlight(), "past the limit of 2")

		got := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(t.Context())
			assert.NoError(t, err)
			got <- tk
		}()
		synctest.Wait()
		assert.Equal(t, 1, l.Waiting())
		l.Release(a, nil)
		synctest.Wait()
		assert.Equal(t, 1, l.Waiting(), "two of the limit of 2 still in flight: the waiter waits")
		l.Release(c, errOverloaded)
		assert.Equal(t, 2, l.Limit(), "the entered attempt's failure is learned: 2 * 0.9 = 1.8, 2 let in")
		tk := <-got // one in flight of 1.8
		l.Release(b, nil)
		l.Release(tk, nil)
		assert.Zero(t, l.InFlight())
		assert.Zero(t, (*limit.Limiter)(nil).Enter(), "a nil Limiter holds nothing")
	})
}

// TestSlotGrantedAsTheWaitEndsGoesOn: a waiter whose context ends as its
// slot is granted (both at once: the select may take either) does not
// keep the slot: it goes to the next waiter, and nothing is lost.
func TestSlotGrantedAsTheWaitEndsGoesOn(t *testing.T) {
	for range 20 { // either case of the select, each time
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewFixed(1, limit.MaxWaiting(2))
			held := acquire(t, l)
			ctx, cancel := context.WithCancel(t.Context())
			first := make(chan error, 1)
			go func() { _, err := l.Acquire(ctx); first <- err }()
			synctest.Wait()
			second := make(chan limit.Ticket, 1)
			go func() {
				tk, err := l.Acquire(t.Context())
				assert.NoError(t, err)
				second <- tk
			}()
			synctest.Wait()
			cancel()
			l.Release(held, nil) // granted to the first waiter, whose context has ended
			require.ErrorIs(t, <-first, limit.ErrLimited, "a caller gone gets no slot")
			tk := <-second
			assert.Equal(t, 1, l.InFlight(), "the slot went on to the second waiter")
			l.Release(tk, nil)
			assert.Zero(t, l.InFlight())
		})
	}
}

// TestAFarDeadlineIsNotLate: a waiter whose deadline is a century off is
// not late (four times its time left overflowed, and it was), so the
// queue stays first come first served.
func TestAFarDeadlineIsNotLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(2))
		first := acquire(t, l)
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(100*365*24*time.Hour))
		defer cancel()
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, c := range []context.Context{ctx, t.Context()} {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				tk, err := l.Acquire(c)
				if assert.NoError(t, err) {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					l.Release(tk, nil)
				}
			})
		}
		time.Sleep(10 * time.Millisecond)
		l.Release(first, nil)
		wg.Wait()
		assert.Equal(t, []int{0, 1}, order)
	})
}

// A Ticket released twice: the count of attempts in flight does not go
// below none, so the limit still holds.
func TestReleaseTwiceKeepsTheLimit(t *testing.T) {
	l := limit.NewFixed(1)
	tk, err := l.Acquire(context.Background())
	require.NoError(t, err)
	l.Release(tk, nil)
	l.Release(tk, nil)
	assert.Equal(t, 0, l.InFlight())
	_, err = l.Acquire(context.Background())
	require.NoError(t, err)
	_, err = l.Acquire(context.Background())
	assert.ErrorIs(t, err, limit.ErrLimited, "one slot, taken")
}

// AcquireExtra takes a slot only while half of the limit stays free and
// nobody waits; its slot is released as any.
func TestAcquireExtraLeavesHalfTheLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, held, want int // want: how many extra slots it grants
	}{
		{1, 0, 0}, {2, 0, 1}, {2, 1, 0}, {3, 1, 0}, {4, 1, 1}, {10, 0, 5}, {10, 3, 2}, {10, 5, 0},
	} {
		t.Run(fmt.Sprintf("%d of %d held", tc.held, tc.limit), func(t *testing.T) {
			l := limit.NewFixed(tc.limit)
			for range tc.held {
				acquire(t, l)
			}
			var tks []limit.Ticket
			for {
				tk, err := l.AcquireExtra(nil)
				if err != nil {
					require.ErrorIs(t, err, limit.ErrLimited)
					break
				}
				tks = append(tks, tk)
			}
			assert.Len(t, tks, tc.want)
			assert.Equal(t, tc.held+tc.want, l.InFlight())
			for _, tk := range tks {
				l.Release(tk, nil)
			}
			assert.Equal(t, tc.held, l.InFlight())
		})
	}
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(10, limit.MaxWaiting(1))
		for range 10 {
			acquire(t, l)
		}
		go func() { _, _ = l.Acquire(t.Context()) }()
		synctest.Wait()
		_, err := l.AcquireExtra(nil)
		assert.ErrorIs(t, err, limit.ErrLimited, "an attempt waits")
	})
	tk, err := (*limit.Limiter)(nil).AcquireExtra(nil)
	assert.Zero(t, tk)
	assert.NoError(t, err)
}

// An attempt that finds the limit full stops the newest extra attempt,
// once, and takes its slot as it ends, whatever MaxWaiting; the extra's
// failure teaches nothing; an attempt that finds none stopped-for is
// refused; one that leaves lets the slot go back.
func TestAnAttemptTakesAnExtraAttemptsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(4), limit.Max(4))
		var stopped []int
		a := acquire(t, l)
		e1, err := l.AcquireExtra(func() { stopped = append(stopped, 1) })
		require.NoError(t, err)
		b, c := acquire(t, l), acquire(t, l)
		require.Equal(t, 4, l.InFlight())
		got := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(t.Context())
			assert.NoError(t, err)
			got <- tk
		}()
		synctest.Wait()
		assert.Equal(t, []int{1}, stopped, "the extra is stopped")
		_, err = l.Acquire(t.Context())
		assert.ErrorIs(t, err, limit.ErrLimited, "no extra left to stop: refused")
		l.Release(e1, errOverloaded) // its slot goes on; its failure teaches nothing
		d := <-got
		assert.Equal(t, 4, l.InFlight())
		assert.Equal(t, 4, l.Limit())
		for _, tk := range []limit.Ticket{a, b, c, d} {
			l.Release(tk, nil)
		}
		assert.Zero(t, l.InFlight())

		// The attempt that stopped it leaves: the slot is given back.
		a = acquire(t, l)
		e2, err := l.AcquireExtra(func() { stopped = append(stopped, 2) })
		require.NoError(t, err)
		b, c = acquire(t, l), acquire(t, l)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			_, err := l.Acquire(ctx)
			assert.ErrorIs(t, err, limit.ErrLimited)
		}()
		synctest.Wait()
		cancel()
		synctest.Wait()
		l.Release(e2, nil)
		assert.Equal(t, 3, l.InFlight())
		for _, tk := range []limit.Ticket{a, b, c} {
			l.Release(tk, nil)
		}
		assert.Zero(t, l.InFlight())

		// Not stopped: released as any, and its stop never called.
		e3, err := l.AcquireExtra(func() { stopped = append(stopped, 3) })
		require.NoError(t, err)
		l.Release(e3, nil)
		assert.Equal(t, []int{1, 2}, stopped)
		assert.Zero(t, l.InFlight())

		// A done context stops no extra attempt.
		a = acquire(t, l)
		e4, err := l.AcquireExtra(func() { stopped = append(stopped, 4) })
		require.NoError(t, err)
		b, c = acquire(t, l), acquire(t, l)
		_, err = l.Acquire(ctx)
		assert.ErrorIs(t, err, limit.ErrLimited)
		assert.Equal(t, []int{1, 2}, stopped)
		for _, tk := range []limit.Ticket{a, b, c, e4} {
			l.Release(tk, nil)
		}
		assert.Zero(t, l.InFlight())
	})
}

// A Ticket granted from the queue 6.3 days after the Limiter began holds
// a time whose top bit is an extra attempt's mark: released as its own.
func TestATimedTicketIsNoExtraAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(1), limit.OldestOnTime())
		time.Sleep(time.Duration(1<<29+1000) * time.Millisecond)
		a := acquire(t, l)
		got := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(t.Context())
			assert.NoError(t, err)
			got <- tk
		}()
		synctest.Wait()
		l.Release(a, nil)
		b := <-got
		require.NotZero(t, b&(1<<61), "the time's top bit is set")
		l.Release(b, nil)
		assert.Zero(t, l.InFlight())
	})
}
