package limit_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Waiters that come and go (timeouts, cancellations exactly as a slot
// frees, no deadline), holders that release with any class of error:
// a fixed limit is never exceeded, and at the end nothing is held or
// queued, and the next Acquire is admitted at once.
func TestReview57QueueChurnLosesNoSlot(t *testing.T) {
	for _, mk := range []struct {
		name  string
		fixed bool
		new   func() *limit.Limiter
	}{
		{"fixed", true, func() *limit.Limiter { return limit.NewFixed(4, limit.MaxWaiting(16)) }},
		{"fixed-oldest", true, func() *limit.Limiter { return limit.NewFixed(4, limit.MaxWaiting(1<<30), limit.OldestOnTime()) }},
		{"aimd", false, func() *limit.Limiter { return limit.NewAIMD(limit.Initial(4), limit.Max(8), limit.MaxWaiting(16)) }},
		{"aimd-oldest", false, func() *limit.Limiter {
			return limit.NewAIMD(limit.Initial(4), limit.Max(8), limit.Backoff(0.5), limit.MaxWaiting(math.MaxInt), limit.OldestOnTime())
		}},
	} {
		t.Run(mk.name, func(t *testing.T) {
			l := mk.new()
			var cur, peak atomic.Int64
			var wg sync.WaitGroup
			end := time.Now().Add(500 * time.Millisecond)
			errs := []error{nil, nil, nil, errors.New("503"), context.Canceled, context.DeadlineExceeded,
				resilience.Permanent(errors.New("400")), limit.ErrLimited}
			for g := 0; g < 48; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						var ctx context.Context
						var cancel context.CancelFunc
						switch rand.IntN(3) {
						case 0:
							ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
						case 1:
							ctx, cancel = context.WithCancel(context.Background())
							d := time.Duration(rand.IntN(2000)) * time.Microsecond
							go func() { time.Sleep(d); cancel() }()
						default:
							ctx, cancel = context.WithCancel(context.Background())
						}
						tk, err := l.Acquire(ctx)
						if err != nil {
							if !errors.Is(err, limit.ErrLimited) || resilience.Classify(err) != resilience.ClassRejected {
								t.Errorf("Acquire: %v", err)
							}
							cancel()
							continue
						}
						if tk == 0 {
							t.Errorf("a zero Ticket for an admitted attempt")
						}
						c := cur.Add(1)
						for m := peak.Load(); c > m && !peak.CompareAndSwap(m, c); m = peak.Load() {
						}
						if mk.fixed && c > 4 {
							t.Errorf("%d hold a slot of a limit of 4", c)
						}
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						cur.Add(-1)
						l.Release(tk, errs[rand.IntN(len(errs))])
						cancel()
					}
				}()
			}
			wg.Wait()
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Errorf("at the end: in flight %d, waiting %d", l.InFlight(), l.Waiting())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			n := 0
			var tks []limit.Ticket
			for i := 0; i < l.Limit(); i++ {
				tk, err := l.Acquire(ctx)
				if err != nil {
					break
				}
				n++
				tks = append(tks, tk)
			}
			for _, tk := range tks {
				l.Release(tk, context.Canceled)
			}
			t.Logf("peak %d, limit now %d, %d admitted at once after", peak.Load(), l.Limit(), n)
			if n != l.Limit() {
				t.Errorf("after the churn only %d of %d slots could be taken", n, l.Limit())
			}
		})
	}
}

// Extreme options behave: huge limits and queues, panics for the invalid.
func TestReview57ExtremeOptions(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("NewFixed(0)", func() { limit.NewFixed(0) })
	mustPanic("NewFixed(-1)", func() { limit.NewFixed(-1) })
	mustPanic("NewFixed(MinInt)", func() { limit.NewFixed(math.MinInt) })
	mustPanic("Backoff(NaN)", func() { limit.Backoff(math.NaN()) })
	mustPanic("Backoff(1)", func() { limit.Backoff(1) })
	mustPanic("Backoff(Inf)", func() { limit.Backoff(math.Inf(1)) })
	mustPanic("Backoff(-Inf)", func() { limit.Backoff(math.Inf(-1)) })
	mustPanic("Backoff(0.49)", func() { limit.Backoff(0.49) })
	mustPanic("MaxWaiting(-1)", func() { limit.MaxWaiting(-1) })
	mustPanic("Initial(0)", func() { limit.Initial(0) })
	mustPanic("Min(-1)", func() { limit.Min(-1) })
	mustPanic("Max(0)", func() { limit.Max(0) })
	mustPanic("Initial>Max", func() { limit.NewAIMD(limit.Initial(1001)) })
	mustPanic("Min>Initial", func() { limit.NewAIMD(limit.Min(21)) })
	mustPanic("NewFixed(Initial)", func() { limit.NewFixed(1, limit.Initial(1)) })
	mustPanic("NewFixed(Backoff)", func() { limit.NewFixed(1, limit.Backoff(0.5)) })

	ctx := context.Background()
	for _, l := range []*limit.Limiter{
		limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt)),
		limit.NewAIMD(limit.Initial(math.MaxInt), limit.Max(math.MaxInt), limit.Min(math.MaxInt)),
		limit.NewAIMD(limit.Min(1), limit.Initial(1), limit.Max(math.MaxInt), limit.Backoff(math.Nextafter(1, 0))),
		limit.NewAIMD(limit.Min(1), limit.Initial(1), limit.Max(1), limit.Backoff(0.5)),
		limit.NewFixed(1, nil),
	} {
		var tks []limit.Ticket
		for i := 0; i < 100; i++ {
			tk, err := l.Acquire(ctx)
			if err != nil {
				break
			}
			tks = append(tks, tk)
		}
		for i, tk := range tks {
			if i%2 == 0 {
				l.Release(tk, errors.New("503"))
			} else {
				l.Release(tk, nil)
			}
		}
		if l.Limit() < 1 || l.InFlight() != 0 {
			t.Errorf("limit %d in flight %d", l.Limit(), l.InFlight())
		}
		tk, err := l.Acquire(ctx)
		if err != nil {
			t.Errorf("after: %v (limit %d)", err, l.Limit())
		}
		l.Release(tk, nil)
		t.Logf("admitted %d, limit now %d", len(tks), l.Limit())
	}
	// Min(MaxInt)-like minimum stays: failures never take it under Min.
	l := limit.NewAIMD(limit.Min(50), limit.Initial(50), limit.Max(60))
	for i := 0; i < 100; i++ {
		tk, _ := l.Acquire(ctx)
		l.Release(tk, errors.New("503"))
	}
	if l.Limit() != 50 {
		t.Errorf("under Min: %d", l.Limit())
	}
	// A nil Limiter admits all.
	var nl *limit.Limiter
	if tk, err := nl.Acquire(ctx); tk != 0 || err != nil {
		t.Errorf("nil: %v %v", tk, err)
	}
	nl.Release(0, nil)
	_ = nl.Enter()
}

// Release twice of one Ticket: documented to give back another's slot, but
// never below none.
func TestReview57DoubleRelease(t *testing.T) {
	l := limit.NewFixed(1)
	tk, _ := l.Acquire(context.Background())
	l.Release(tk, nil)
	l.Release(tk, nil)
	if l.InFlight() != 0 {
		t.Errorf("in flight %d", l.InFlight())
	}
	l.Release(0, nil)
}
