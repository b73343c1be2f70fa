package limit_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A waiter canceled mid-queue leaves no ghost: the next one gets the slot.
func TestReview150CanceledWaiterLeavesNoGhost(t *testing.T) {
	for _, oot := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []limit.Option{limit.MaxWaiting(3)}
			if oot {
				opts = append(opts, limit.OldestOnTime())
			}
			l := limit.NewFixed(1, opts...)
			hold, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			type res struct {
				tk  limit.Ticket
				err error
			}
			ctxs := make([]context.Context, 3)
			cancels := make([]context.CancelFunc, 3)
			out := make([]chan res, 3)
			for i := range 3 {
				ctxs[i], cancels[i] = context.WithTimeout(context.Background(), time.Hour)
				out[i] = make(chan res, 1)
				go func() {
					tk, err := l.Acquire(ctxs[i])
					out[i] <- res{tk, err}
				}()
				synctest.Wait()
			}
			if w := l.Waiting(); w != 3 {
				t.Fatalf("Waiting = %d, want 3", w)
			}
			cancels[1]()
			synctest.Wait()
			if r := <-out[1]; !errors.Is(r.err, limit.ErrLimited) {
				t.Fatalf("canceled waiter: %v", r.err)
			}
			if w := l.Waiting(); w != 2 {
				t.Fatalf("Waiting after cancel = %d, want 2", w)
			}
			l.Release(hold, nil)
			synctest.Wait()
			r0 := <-out[0]
			if r0.err != nil {
				t.Fatalf("first waiter: %v", r0.err)
			}
			l.Release(r0.tk, nil)
			synctest.Wait()
			select {
			case r2 := <-out[2]:
				if r2.err != nil {
					t.Fatalf("third waiter: %v", r2.err)
				}
				l.Release(r2.tk, nil)
			default:
				t.Fatalf("third waiter not served after two releases: a ghost holds its turn")
			}
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Fatalf("in flight %d, waiting %d", l.InFlight(), l.Waiting())
			}
			for _, c := range cancels {
				c()
			}
		})
	}
}

// A queued Acquire never outlives its context's deadline.
func TestReview150QueuedWaitEndsAtDeadline(t *testing.T) {
	for _, l := range []*limit.Limiter{
		limit.NewFixed(1, limit.MaxWaiting(10)),
		limit.NewAIMD(limit.Initial(1), limit.MaxWaiting(10), limit.OldestOnTime()),
	} {
		synctest.Test(t, func(t *testing.T) {
			hold, _ := l.Acquire(context.Background())
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Go(func() {
					d := time.Duration(10*(i+1)) * time.Millisecond
					ctx, cancel := context.WithTimeout(context.Background(), d)
					defer cancel()
					start := time.Now()
					_, err := l.Acquire(ctx)
					if !errors.Is(err, limit.ErrLimited) {
						t.Errorf("waiter %d: %v", i, err)
					}
					if took := time.Since(start); took > d {
						t.Errorf("waiter %d waited %v past its deadline %v", i, took, d)
					}
				})
			}
			wg.Wait()
			if l.Waiting() != 0 {
				t.Fatalf("Waiting = %d", l.Waiting())
			}
			l.Release(hold, nil)
			if l.InFlight() != 0 {
				t.Fatalf("InFlight = %d", l.InFlight())
			}
		})
	}
}

// MaxWaiting is never exceeded, and every slot comes back, under churn:
// plain acquires, cancellations, extras with and without stop.
func TestReview150ChurnMaxWaitingAndSlots(t *testing.T) {
	for _, stops := range []bool{false, true} {
		t.Run(map[bool]string{false: "nostop", true: "stops"}[stops], func(t *testing.T) { churn(t, stops) })
	}
}

func churn(t *testing.T, stops bool) {
	const cap, maxW = 4, 3
	li := 0
	for _, mk := range []func() *limit.Limiter{
		func() *limit.Limiter { return limit.NewFixed(cap, limit.MaxWaiting(maxW)) },
		func() *limit.Limiter {
			return limit.NewAIMD(limit.Initial(cap), limit.Max(cap), limit.MaxWaiting(maxW), limit.OldestOnTime())
		},
	} {
		li++
		l := mk()
		var over atomic.Int64
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Heirs of stopped extras wait past MaxWaiting (AcquireExtra's
				// doc): at most one per extra, and extras hold at most half.
				bound := maxW
				if stops {
					bound += cap / 2
				}
				if w := l.Waiting(); w > bound {
					over.Store(int64(w))
				}
				if f := l.InFlight(); f > cap {
					over.Store(int64(-f))
				}
			}
		})
		var wg sync.WaitGroup
		deadline := time.Now().Add(400 * time.Millisecond)
		for g := range 16 {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					switch (g + i) % 4 {
					case 0, 1:
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
						tk, err := l.Acquire(ctx)
						if err == nil {
							time.Sleep(time.Duration(i%2) * 100 * time.Microsecond)
							var e error
							if i%5 == 0 {
								e = context.Canceled
							}
							l.Release(tk, e)
						}
						cancel()
					case 2:
						ctx, cancel := context.WithCancel(context.Background())
						var stop func()
						if stops {
							stop = cancel
						}
						tk, err := l.AcquireExtra(stop)
						if err == nil {
							select {
							case <-ctx.Done():
							case <-time.After(200 * time.Microsecond):
							}
							l.Release(tk, nil)
						}
						cancel()
					case 3:
						tk, err := l.AcquireExtra(nil)
						if err == nil {
							l.Release(tk, nil)
						}
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sampler.Wait()
		if v := over.Load(); v != 0 {
			t.Errorf("limiter %d: bound broken: %d (positive: Waiting over MaxWaiting, negative: in flight over the limit)", li, v)
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Fatalf("after churn: in flight %d, waiting %d", l.InFlight(), l.Waiting())
		}
		var tks []limit.Ticket
		for range cap {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatalf("full capacity not usable after churn: %v (limit %d)", err, l.Limit())
			}
			tks = append(tks, tk)
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
	}
}

type permErr struct{}

func (permErr) Error() string                     { return "400 bad request" }
func (permErr) ResilienceClass() resilience.Class { return resilience.ClassPermanent }

// The caller's errors never lower an adaptive limit.
func TestReview150AIMDCallerErrorsTeachNothing(t *testing.T) {
	for _, e := range []error{context.Canceled, resilience.Rejected(errors.New("x")), permErr{},
		resilience.Permanent(errors.New("bad")), errors.Join(context.Canceled)} {
		l := limit.NewAIMD(limit.Initial(10))
		for range 5 {
			var tks []limit.Ticket
			for range 10 {
				tk, err := l.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				tks = append(tks, tk)
			}
			for _, tk := range tks {
				l.Release(tk, e)
			}
		}
		if got := l.Limit(); got < 10 {
			t.Errorf("%v lowered the limit to %d", e, got)
		}
	}
}

// A burst of failures sent in one round decreases once; the limit then
// recovers under a healthy load within a few round trips.
func TestReview150AIMDFallsOnceAndRecovers(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(100), limit.Max(200))
	var tks []limit.Ticket
	for range 60 {
		tk, _ := l.Acquire(context.Background())
		tks = append(tks, tk)
	}
	for _, tk := range tks {
		l.Release(tk, context.DeadlineExceeded)
	}
	if got := l.Limit(); got != 90 {
		t.Fatalf("after a burst of 60 failures of one round: %d, want 90", got)
	}
	// Healthy steady load keeping the limit full: each release is
	// replaced at once by a new attempt; a round trip is Limit() releases.
	tks = tks[:0]
	for {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			break
		}
		tks = append(tks, tk)
	}
	rounds := 0
	for l.Limit() < 100 && rounds < 50 {
		rounds++
		for range l.Limit() {
			l.Release(tks[0], nil)
			tks = tks[1:]
			for {
				tk, err := l.Acquire(context.Background())
				if err != nil {
					break
				}
				tks = append(tks, tk)
			}
		}
	}
	for _, tk := range tks {
		l.Release(tk, nil)
	}
	if l.Limit() < 100 {
		t.Fatalf("limit %d after %d healthy full rounds", l.Limit(), rounds)
	}
	t.Logf("back to 100 in %d round trips", rounds)
	if rounds > 15 {
		t.Errorf("took %d round trips to climb from 90 to 100: docs say one a round trip", rounds)
	}
}

// Extreme options: rejected clearly, or working.
func TestReview150LimitExtremes(t *testing.T) {
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
	mustPanic("Initial(0)", func() { limit.Initial(0) })
	mustPanic("Min(-5)", func() { limit.Min(-5) })
	mustPanic("Max(0)", func() { limit.Max(0) })
	mustPanic("MaxWaiting(-1)", func() { limit.MaxWaiting(-1) })
	mustPanic("Backoff(NaN)", func() { limit.Backoff(math.NaN()) })
	mustPanic("Backoff(+Inf)", func() { limit.Backoff(math.Inf(1)) })
	mustPanic("Backoff(-Inf)", func() { limit.Backoff(math.Inf(-1)) })
	mustPanic("Backoff(1)", func() { limit.Backoff(1) })
	mustPanic("Backoff(0)", func() { limit.Backoff(0) })
	mustPanic("NewFixed with Backoff", func() { limit.NewFixed(3, limit.Backoff(0.7)) })
	mustPanic("Min > Initial", func() { limit.NewAIMD(limit.Min(30)) })

	for _, l := range []*limit.Limiter{
		limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt)),
		limit.NewAIMD(limit.Initial(math.MaxInt), limit.Max(math.MaxInt), limit.Min(math.MaxInt-1), limit.MaxWaiting(math.MaxInt)),
		limit.NewAIMD(limit.Initial(1), limit.Max(1), limit.MaxWaiting(math.MaxInt)),
	} {
		if l.Limit() < 1 {
			t.Errorf("Limit() = %d", l.Limit())
		}
		var tks []limit.Ticket
		for range 1000 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			tk, err := l.Acquire(ctx)
			cancel()
			if err == nil {
				tks = append(tks, tk)
			}
		}
		if len(tks) == 0 || (l.Limit() > 1000 && len(tks) != 1000) {
			t.Errorf("limit %d admitted %d of 1000", l.Limit(), len(tks))
		}
		for _, tk := range tks {
			l.Release(tk, errors.New("503"))
		}
		if l.InFlight() != 0 || l.Limit() < 1 {
			t.Errorf("after: in flight %d limit %d", l.InFlight(), l.Limit())
		}
	}
}

// MaxWaiting(0): no attempt waits. An attempt that claims a hedge's slot
// waits past MaxWaiting (AcquireExtra's doc); once the limit falls below
// what the hedge's slot allows, it "waits as any other", no longer an
// heir: a plain waiter in a queue of MaxWaiting(0).
func TestReview150MaxWaitingZeroHoldsAWaiterAfterTheLimitFalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(4), limit.Backoff(0.5), limit.MaxWaiting(0))
		stopped := false
		ex, err := l.AcquireExtra(func() { stopped = true })
		if err != nil {
			t.Fatal(err)
		}
		var tks []limit.Ticket
		for range 3 {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tks = append(tks, tk)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			tk, err := l.Acquire(ctx)
			if err == nil {
				l.Release(tk, nil)
			}
			got <- err
		}()
		synctest.Wait()
		if !stopped || l.Waiting() != 1 {
			t.Fatalf("heir: stopped %v waiting %d", stopped, l.Waiting())
		}
		l.Release(tks[0], errors.New("503")) // the limit falls: 4 -> 2
		l.Release(ex, context.Canceled)      // the hedge ends; its heir is not let in (limit 2, 2 in flight)
		synctest.Wait()
		w := l.Waiting()
		// A new attempt is refused at once, while the old heir waits on.
		if _, err := l.Acquire(ctx); !errors.Is(err, limit.ErrLimited) {
			t.Fatalf("new attempt: %v", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		stillWaiting := l.Waiting()
		for _, tk := range tks[1:] {
			l.Release(tk, nil)
		}
		synctest.Wait()
		if err := <-got; err != nil {
			t.Logf("heir: %v", err)
		}
		if w > 0 || stillWaiting > 0 {
			t.Errorf("MaxWaiting(0) but %d waiting right after the hedge ended, %d a minute later, no heir among them", w, stillWaiting)
		}
	})
}

// Slow start "doubles the limit each round trip" (package doc). A round
// trip here: the limit filled at once, then every attempt answered.
func TestReview150SlowStartDoublesEachRoundTrip(t *testing.T) {
	for _, lifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "released in the order sent", true: "released newest first"}[lifo], func(t *testing.T) {
			review150SlowStart(t, lifo)
		})
	}
}

func review150SlowStart(t *testing.T, lifo bool) {
	l := limit.NewAIMD(limit.Initial(20))
	for round := range 3 {
		before := l.Limit()
		var tks []limit.Ticket
		for {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				break
			}
			tks = append(tks, tk)
		}
		if lifo {
			slices.Reverse(tks)
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
		t.Logf("round trip %d: %d attempts, limit %d -> %d", round, len(tks), before, l.Limit())
		if l.Limit() < 2*before*9/10 {
			t.Errorf("round trip %d: slow start took the limit from %d to %d, not about double", round, before, l.Limit())
		}
	}
}
