package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"go.uber.org/goleak"
)

// A call answered before the delay: one allocation (docs), no goroutine.
func TestReview67AllocsUnhedged(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	op := func(ctx context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	Do(ctx, p, op)
	a := testing.AllocsPerRun(1000, func() { Do(ctx, p, op) })
	t.Logf("allocs per unhedged call: %v", a)
	if a > 1 {
		t.Errorf("allocs per unhedged call %v, docs say one", a)
	}
	// adaptive policy once learned
	h := hedge.New()
	for range 64 {
		h.Observe(time.Hour)
	}
	p2 := New(WithHedging(h))
	a = testing.AllocsPerRun(1000, func() { Do(ctx, p2, op) })
	t.Logf("allocs per unhedged call (adaptive): %v", a)
	if a > 1 {
		t.Errorf("adaptive: allocs per unhedged call %v, docs say one", a)
	}
	// goroutines while many calls wait for their first attempt, none hedged
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	release := make(chan struct{})
	var started sync.WaitGroup
	for range 500 {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			Do(ctx, p, func(ctx context.Context) (int, error) { started.Done(); <-release; return 1, nil })
		}()
	}
	started.Wait()
	if n := runtime.NumGoroutine() - base; n > 500+2 {
		t.Errorf("%d goroutines for 500 calls not hedged", n)
	}
	close(release)
	wg.Wait()
}

// A hedge never queues at a concurrency limit; its refusal never surfaces.
func TestReview67HedgeNeverQueues(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := limit.NewFixed(2, limit.MaxWaiting(100))
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))), WithLimit(l))
	var n atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
				n.Add(1)
				time.Sleep(100 * time.Millisecond) // ignores ctx
				return i, nil
			})
			errs <- err
		}()
	}
	time.Sleep(30 * time.Millisecond)
	if w := l.Waiting(); w != 0 {
		t.Errorf("%d waiting at the limit: a hedge queued", w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("call failed: %v", err)
		}
	}
	if n.Load() != 2 {
		t.Errorf("%d attempts ran; hedges should be refused", n.Load())
	}
}

// The retry stage counts a hedged group as one attempt.
func TestReview67RetryCountsGroupOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rp := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))
	p := New(WithRetry(rp), WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))))
	var n, hedges atomic.Int32
	_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n.Add(1)
		if p.IsHedge(ctx) {
			hedges.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
		return 0, errors.New("transient")
	})
	if err == nil {
		t.Fatal("no error")
	}
	t.Logf("attempts %d (hedges %d): %v", n.Load(), hedges.Load(), err)
	if got := n.Load() - hedges.Load(); got != 3 {
		t.Errorf("%d first attempts, want 3 races", got)
	}
}

// A loser's failure never surfaces: the first attempt fails (retryable) after a
// hedge was sent, the hedge succeeds later; no retry stage.
func TestReview67LoserErrorHidden(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	for range 20 {
		var n atomic.Int32
		v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond)
				return 0, errors.New("first failed")
			}
			time.Sleep(30 * time.Millisecond)
			return 9, nil
		})
		if err != nil || v != 9 {
			t.Fatalf("got %v %v", v, err)
		}
	}
}

// A hedge panicking after the race was decided must not crash the process.
func TestReview67LatePanicInHedge(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	done := make(chan struct{})
	var n atomic.Int32
	v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			time.Sleep(20 * time.Millisecond)
			return 1, nil
		}
		defer close(done)
		<-ctx.Done()
		panic("late")
	})
	if v != 1 || err != nil {
		t.Fatal(v, err)
	}
	<-done
	time.Sleep(20 * time.Millisecond)
}

type fakeRace67 struct {
	due   hedgeDue
	added monotime.Reading
	d     time.Duration
	fired atomic.Int64 // reading when fired, 0 none
	gone  atomic.Bool
}

func (f *fakeRace67) fire() { f.fired.Store(int64(monotime.Now())) }

// The pipeline's one timer under thousands of concurrent races with different delays:
// none fires early, none removed fires, every armed one fires reasonably soon.
func TestReview67SharedTimerMany(t *testing.T) {
	var ht hedgeTimers
	const N = 5000
	fs := make([]*fakeRace67, N)
	var wg sync.WaitGroup
	for i := range N {
		f := &fakeRace67{d: time.Duration(rand.IntN(200)+1) * time.Millisecond}
		if i%7 == 0 {
			f.d = time.Duration(rand.IntN(1000) + 1) // ns
		}
		f.due.race, f.due.sent = f, 1
		fs[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
			f.added = monotime.Now()
			if !ht.add(&f.due, f.d) {
				t.Error("add false outside bubble")
				return
			}
			if rand.IntN(3) == 0 {
				time.Sleep(time.Duration(rand.IntN(int(f.d)+1)) / 2)
				if ht.disarm(&f.due) {
					f.gone.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(600 * time.Millisecond)
	var late time.Duration
	for i, f := range fs {
		at := monotime.Reading(f.fired.Load())
		switch {
		case f.gone.Load() && at != 0:
			t.Fatalf("race %d disarmed but fired", i)
		case !f.gone.Load() && at == 0:
			t.Fatalf("race %d (d %v) never fired", i, f.d)
		case at != 0 && time.Duration(at-f.added) < f.d:
			t.Fatalf("race %d fired %v after add, delay %v", i, time.Duration(at-f.added), f.d)
		case at != 0:
			late = max(late, time.Duration(at-f.added)-f.d)
		}
	}
	t.Logf("latest fire %v after due", late)
	ht.mu.Lock()
	if len(ht.due) != 0 {
		t.Errorf("%d left in heap", len(ht.due))
	}
	ht.mu.Unlock()
}

// Operations keep their context after returning and read it from another goroutine
// while the pipeline's next calls reuse the spare; -race must stay quiet and each
// kept context must stay the call's own (values, done).
type key67 struct{}

func TestReview67KeptCtxConcurrent(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(3*time.Millisecond), hedge.MaxShare(0.5))))
	var wg, readers sync.WaitGroup
	var bad atomic.Int32
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := g*1000 + i
				ctx := context.WithValue(context.Background(), key67{}, id)
				Do(ctx, p, func(ctx context.Context) (int, error) {
					readers.Add(1)
					go func() {
						defer readers.Done()
						for range 5 {
							if ctx.Value(key67{}) != id {
								bad.Add(1)
							}
							_ = ctx.Err()
							_, _ = ctx.Deadline()
							runtime.Gosched()
						}
						select {
						case <-ctx.Done():
						case <-time.After(2 * time.Second):
							bad.Add(1000)
						}
					}()
					if i%10 == 0 {
						time.Sleep(5 * time.Millisecond)
					}
					return id, nil
				})
			}
		}()
	}
	wg.Wait()
	readers.Wait()
	if bad.Load() != 0 {
		t.Errorf("bad %d", bad.Load())
	}
}
