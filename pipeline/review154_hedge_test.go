package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r154Closer is an attempt's result that must be closed once, unless it
// is the call's result.
type r154Closer struct {
	id     int
	closed atomic.Int32
}

func (c *r154Closer) Close() error { c.closed.Add(1); return nil }

// r154Attempts hands out the results of a call's attempts, in the order
// their operations are called.
type r154Attempts struct {
	mu  sync.Mutex
	all []*r154Closer
}

func (a *r154Attempts) next() *r154Closer {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &r154Closer{id: len(a.all)}
	a.all = append(a.all, c)
	return c
}

// check asserts every result but res was closed once, and res never.
func (a *r154Attempts) check(t *testing.T, res *r154Closer) { t.Helper(); a.checkDropped(t, res, 0) }

// checkDropped is check, letting up to dropped results (those a race of
// twins ended with, with an error retried: dropped as without hedging)
// go unclosed.
func (a *r154Attempts) checkDropped(t *testing.T, res *r154Closer, dropped int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	unclosed := 0
	for _, c := range a.all {
		n := c.closed.Load()
		switch {
		case c == res && n != 0:
			t.Errorf("the call's own result (attempt %d) was closed %d times", c.id, n)
		case c != res && n == 0:
			unclosed++
		case c != res && n != 1:
			t.Errorf("loser attempt %d closed %d times, want 1", c.id, n)
		}
	}
	if unclosed > dropped {
		t.Errorf("%d of %d results never closed (nor returned), at most %d dropped allowed", unclosed, len(a.all), dropped)
	}
}

var errR154Transient = errors.New("r154: transient")

// r154Op runs attempt i (0 the first) for lat[i], honoring its context,
// and ends with errs[i]; it always returns a result to dispose of.
func r154Op(a *r154Attempts, lat []time.Duration, errs []error, hedges *atomic.Int32, p **Pipeline) resilience.Operation[*r154Closer] {
	var n atomic.Int32
	return func(ctx context.Context) (*r154Closer, error) {
		i := int(n.Add(1) - 1)
		if (*p).IsHedge(ctx) {
			hedges.Add(1)
		}
		c := a.next()
		d := lat[min(i, len(lat)-1)]
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return c, ctx.Err()
		}
		if i < len(errs) && errs[i] != nil {
			return c, errs[i]
		}
		return c, nil
	}
}

func r154Discard() CallOption {
	return Discard(func(c *r154Closer) {
		if c != nil {
			c.Close()
		}
	})
}

// (2) Discard: every loser's result closed exactly once; the call's
// never. In fake time, each race keeps a timer of its own.
func TestReview154DiscardOnce(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		lat     []time.Duration
		errs    []error
		retry   bool
		wantErr bool
		dropped int
	}{
		{name: "second hedge wins", lat: []time.Duration{100 * ms, 50 * ms, 30 * ms, 40 * ms}},
		{name: "first wins", lat: []time.Duration{35 * ms, 50 * ms, 50 * ms, 50 * ms}},
		{name: "all fail", lat: []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms},
			errs: []error{errR154Transient, errR154Transient, errR154Transient, errR154Transient}, wantErr: true, dropped: 1},
		{name: "all fail, retried", lat: []time.Duration{40 * ms}, retry: true, wantErr: true, dropped: 3,
			errs: func() []error {
				e := make([]error, 12)
				for i := range e {
					e[i] = errR154Transient
				}
				return e
			}()},
		{name: "hedges fail, first wins late", lat: []time.Duration{60 * ms, 5 * ms, 5 * ms, 5 * ms},
			errs: []error{nil, errR154Transient, errR154Transient, errR154Transient}},
		{name: "ties", lat: []time.Duration{30 * ms, 20 * ms, 10 * ms, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []Option{WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(3), hedge.MaxShare(1)))}
				if tc.retry {
					opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(ms))))
				}
				p := New(opts...)
				a := &r154Attempts{}
				var hedges atomic.Int32
				res, err := Do(context.Background(), p, r154Op(a, tc.lat, tc.errs, &hedges, &p), r154Discard())
				if (err != nil) != tc.wantErr {
					t.Fatalf("err = %v", err)
				}
				synctest.Wait()
				time.Sleep(time.Second)
				synctest.Wait()
				a.checkDropped(t, res, tc.dropped)
				if hedges.Load() == 0 {
					t.Errorf("no hedge was sent")
				}
			})
		})
	}
}

// (2) The same in real time, with the pipeline's one timer, and no
// goroutine left once the losers returned.
func TestReview154DiscardOnceRealTime(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ms := time.Millisecond
	p := New(WithHedging(hedge.New(hedge.Delay(5*ms), hedge.MaxExtra(3), hedge.MaxShare(1))))
	for i := range 20 {
		a := &r154Attempts{}
		var hedges atomic.Int32
		lat := []time.Duration{60 * ms, 40 * ms, 20 * ms, 30 * ms}
		if i%2 == 1 {
			lat = []time.Duration{12 * ms, 50 * ms, 50 * ms, 50 * ms}
		}
		start := time.Now()
		res, err := Do(context.Background(), p, r154Op(a, lat, nil, &hedges, &p), r154Discard())
		took := time.Since(start)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if took > 200*ms {
			t.Errorf("call %d took %v", i, took)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			a.mu.Lock()
			closed := 0
			for _, c := range a.all {
				closed += int(c.closed.Load())
			}
			n := len(a.all)
			a.mu.Unlock()
			if closed >= n-1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(ms)
		}
		a.check(t, res)
	}
	if n := r154HeapLen(p); n != 0 {
		t.Errorf("%d races left in the pipeline's timer after every call ended", n)
	}
}

func r154HeapLen(p *Pipeline) int {
	ht := p.cfg.hedgeTimers
	ht.mu.Lock()
	defer ht.mu.Unlock()
	return len(ht.due)
}

// (2) A panic in a hedge goes on in the caller; the first attempt is
// canceled at once; nothing is left running; a Goexit likewise.
func TestReview154PanicInHedge(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms := time.Millisecond
				p := New(WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(2), hedge.MaxShare(1))))
				var n atomic.Int32
				var firstEnded time.Duration
				start := time.Now()
				op := func(ctx context.Context) (int, error) {
					switch n.Add(1) {
					case 1:
						select {
						case <-time.After(time.Second):
						case <-ctx.Done():
						}
						firstEnded = time.Since(start)
						return 1, ctx.Err()
					case 2:
						time.Sleep(5 * ms)
						if mode == "panic" {
							panic("r154 boom")
						}
						runtime.Goexit()
					}
					<-ctx.Done()
					return 3, ctx.Err()
				}
				var got any
				returned, exited := false, false
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() {
						got = recover()
						exited = !returned
					}()
					_, err := Do(context.Background(), p, op)
					t.Logf("Do returned %v", err)
					returned = true
				}()
				<-done
				synctest.Wait()
				switch mode {
				case "panic":
					if got != "r154 boom" {
						t.Errorf("caller recovered %v, want the hedge's panic", got)
					}
				case "goexit":
					if returned && got == nil {
						t.Errorf("a hedge's Goexit: Do returned normally")
					}
					_ = exited
				}
				if firstEnded > 100*ms {
					t.Errorf("first attempt ran %v: not canceled by the hedge's %s", firstEnded, mode)
				}
				if k := n.Load(); k > 2 {
					t.Errorf("%d attempts: a hedge was sent after the %s", k, mode)
				}
			})
		})
	}
}

// (2) A panic in the first attempt with hedges out: the panic goes on,
// the hedges are canceled and their results closed.
func TestReview154PanicInFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		p := New(WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(3), hedge.MaxShare(1))))
		a := &r154Attempts{}
		var n atomic.Int32
		var hedgeRan atomic.Int64
		op := func(ctx context.Context) (*r154Closer, error) {
			if n.Add(1) == 1 {
				time.Sleep(25 * ms)
				panic("r154 first")
			}
			c := a.next()
			s := time.Now()
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			hedgeRan.Store(int64(time.Since(s)))
			return c, ctx.Err()
		}
		func() {
			defer func() {
				if r := recover(); r != "r154 first" {
					t.Errorf("recovered %v", r)
				}
			}()
			Do(context.Background(), p, op, r154Discard())
		}()
		synctest.Wait()
		if d := time.Duration(hedgeRan.Load()); d > 100*ms {
			t.Errorf("a hedge ran %v after the first attempt panicked", d)
		}
		if k := n.Load(); k != 3 {
			t.Errorf("%d attempts, want 3 (first, hedges at 10ms and 20ms)", k)
		}
		a.check(t, nil)
	})
}

// (3) A hedge that fails with an error not retried stops the next
// hedges; the first attempt goes on and wins.
func TestReview154PermanentHedgeStopsHedging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		p := New(WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(4), hedge.MaxShare(1))),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		var n, hedges atomic.Int32
		op := func(ctx context.Context) (int, error) {
			k := n.Add(1)
			if p.IsHedge(ctx) {
				hedges.Add(1)
			}
			if k == 1 {
				select {
				case <-time.After(60 * ms):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			time.Sleep(2 * ms)
			return 0, resilience.Permanent(errors.New("r154 conflict"))
		}
		res, err := Do(context.Background(), p, op)
		synctest.Wait()
		if err != nil || res != 1 {
			t.Errorf("Do = %v, %v; want the first attempt's success", res, err)
		}
		if h := hedges.Load(); h != 1 {
			t.Errorf("%d hedges sent, want 1: a permanent failure must stop hedging", h)
		}
	})
}

// (3) The breaker opens while a race runs: no more hedges; the call's
// outcome counts once, and a loser canceled by the winner is no failure.
func TestReview154BreakerOpensMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		b := breaker.New("r154")
		p := New(WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(4), hedge.MaxShare(1))))
		var hedges atomic.Int32
		op := func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				hedges.Add(1)
			}
			select {
			case <-time.After(100 * ms):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		go func() {
			time.Sleep(15 * ms)
			if err := b.SetMode(context.Background(), breaker.ForcedOpen, "r154"); err != nil {
				t.Errorf("SetMode: %v", err)
			}
		}()
		_, err := Do(context.Background(), p, op)
		synctest.Wait()
		t.Logf("Do: %v", err)
		if h := hedges.Load(); h != 1 {
			t.Errorf("%d hedges sent, want 1: the breaker opened at 15ms, before the 2nd hedge was due at 20ms", h)
		}
	})
}

func TestReview154LoserNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		b := breaker.New("r154b", breaker.ConsecutiveFailures(1))
		p := New(WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(1), hedge.MaxShare(1))))
		for i := range 10 {
			var n atomic.Int32
			op := func(ctx context.Context) (int, error) {
				k := n.Add(1)
				if (k == 1) == (i%2 == 0) { // the loser
					select {
					case <-time.After(time.Second):
						return 1, nil
					case <-ctx.Done():
						// a client that reports the cancellation its own way
						return 0, fmt.Errorf("r154 connection reset: %w", errR154Transient)
					}
				}
				if k == 1 {
					time.Sleep(15 * ms) // wins after the hedge was sent
				} else {
					time.Sleep(5 * ms)
				}
				return 2, nil
			}
			if _, err := Do(context.Background(), p, op); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			synctest.Wait()
		}
		c := b.Counts()
		if c.TotalFailures != 0 || b.State() != resilience.StateClosed {
			t.Errorf("breaker counted %d failures, state %v: losers canceled by the winner are no failures", c.TotalFailures, b.State())
		}
	})
}

// (3) The pipeline's one timer under thousands of calls in real time: no
// hedge before its delay, none for a call that has returned (with a live
// context), the budget kept, and nothing left in the heap.
func TestReview154SharedTimerStress(t *testing.T) {
	ms := time.Millisecond
	const delay = 8 * time.Millisecond
	h := hedge.New(hedge.Delay(delay), hedge.MaxExtra(2), hedge.MaxShare(0.3))
	var hedgeEvents atomic.Int32
	p := New(WithHedging(h), WithListener(resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged {
			hedgeEvents.Add(1)
		}
	})))
	type callRec struct {
		mu       sync.Mutex
		called   time.Time
		first    time.Time
		hedges   []time.Time
		returned atomic.Bool
		stale    atomic.Int32
	}
	type key struct{}
	const calls = 1500
	recs := make([]*callRec, calls)
	var wg sync.WaitGroup
	var next atomic.Int32
	start := time.Now()
	for range 50 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(next.Load()), 7))
			for {
				i := int(next.Add(1) - 1)
				if i >= calls {
					return
				}
				rec := &callRec{called: time.Now()}
				recs[i] = rec
				lat := time.Duration(rng.IntN(12)) * ms
				if i%5 == 0 {
					lat = 0 // ends early
				}
				ctx := context.WithValue(context.Background(), key{}, rec)
				Do(ctx, p, func(ctx context.Context) (int, error) {
					r := ctx.Value(key{}).(*callRec)
					now := time.Now()
					if r.returned.Load() && ctx.Err() == nil {
						r.stale.Add(1)
					}
					r.mu.Lock()
					if p.IsHedge(ctx) {
						r.hedges = append(r.hedges, now)
					} else {
						r.first = now
					}
					r.mu.Unlock()
					select {
					case <-time.After(lat):
					case <-ctx.Done():
					}
					return 0, nil
				})
				rec.returned.Store(true)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(50 * ms)
	early, stale, sent := 0, 0, 0
	for _, r := range recs {
		r.mu.Lock()
		for _, ht := range r.hedges {
			sent++
			if d := ht.Sub(r.called); d < delay {
				early++
				if early < 5 {
					t.Logf("hedge %v after its call began, delay %v", d, delay)
				}
			}
		}
		r.mu.Unlock()
		stale += int(r.stale.Load())
	}
	t.Logf("%d calls in %v, %d hedges sent, %d events", calls, elapsed, sent, hedgeEvents.Load())
	if early > 0 {
		t.Errorf("%d hedges sent before their delay", early)
	}
	if stale > 0 {
		t.Errorf("%d hedges' operations ran after their call returned, with a live context", stale)
	}
	if elapsed < 9*time.Second {
		if bound := int(0.3*calls+1) + 1; sent > bound {
			t.Errorf("%d hedges for %d calls within one window, budget %d", sent, calls, bound)
		}
	}
	if n := r154HeapLen(p); n != 0 {
		t.Errorf("%d races left in the timer's heap", n)
	}
}

// r154Tracer's attempt spans take a while to end (an exporter on the
// caller's goroutine).
type r154Tracer struct{ endTakes time.Duration }

func (tr r154Tracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, r154Trace(tr)
}

type r154Trace r154Tracer

func (tr r154Trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) { time.Sleep(tr.endTakes) }
}
func (r154Trace) End(error) {}

// (3) WithHedging: a twin of an attempt "still running after h's delay".
// A first attempt that failed before the delay is not running: no hedge
// may follow it (it would be a retry that neither MaxAttempts nor the
// retry quota sees). A slow span end on the caller's goroutine delays the
// race's disarm past the delay.
func TestReview154NoHedgeAfterFirstFailed(t *testing.T) {
	for _, tc := range []struct {
		withRetry bool
		endTakes  time.Duration
	}{{false, 0}, {false, 20 * time.Millisecond}, {true, 20 * time.Millisecond}} {
		withRetry := tc.withRetry
		t.Run(fmt.Sprint("retry=", withRetry, ",spanEnd=", tc.endTakes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms := time.Millisecond
				opts := []Option{WithTracer(r154Tracer{endTakes: tc.endTakes}),
					WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxShare(1)))}
				if withRetry {
					opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
				}
				p := New(opts...)
				var n, hedges atomic.Int32
				_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
					n.Add(1)
					if p.IsHedge(ctx) {
						hedges.Add(1)
						return 2, nil
					}
					time.Sleep(5 * ms)
					return 0, errR154Transient
				})
				synctest.Wait()
				t.Logf("Do: %v (Hedged %v); %d attempts", err, Hedged(err), n.Load())
				if h := hedges.Load(); h != 0 {
					t.Errorf("a hedge was sent %v after the first attempt had failed at 5ms (the delay is 10ms): %d attempts for a call of MaxAttempts 1", 10*ms, n.Load())
				}
			})
		})
	}
}

// (2) The call returns within its time budget when every attempt hangs
// until its context ends.
func TestReview154WithinBudget(t *testing.T) {
	for _, extra := range []int{1, 3, 50} {
		t.Run(fmt.Sprint("extra=", extra), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms := time.Millisecond
				p := New(WithTimeBudget(55*ms), WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(extra), hedge.MaxShare(1))),
					WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5))))
				a := &r154Attempts{}
				start := time.Now()
				res, err := Do(context.Background(), p, func(ctx context.Context) (*r154Closer, error) {
					c := a.next()
					<-ctx.Done()
					return c, ctx.Err()
				}, r154Discard())
				took := time.Since(start)
				if took > 55*ms {
					t.Errorf("call took %v, budget 55ms", took)
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v", err)
				}
				synctest.Wait()
				a.checkDropped(t, res, 5) // one per race at most
			})
		})
	}
}

// (3) A hedge refused by the concurrency limit does not fail its call,
// nor is it reported as a refusal: the call ends with its first attempt's
// answer.
func TestReview154HedgeRefusedByLimit(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		t.Run(fmt.Sprint("firstFails=", firstFails), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms := time.Millisecond
				l := limit.NewFixed(4)
				var limited atomic.Int32
				other := New(WithLimit(l))
				p := New(WithLimit(l), WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(3), hedge.MaxShare(1))),
					WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
					WithListener(resilience.ListenerFunc(func(e resilience.Event) {
						if e.Kind == resilience.EventLimited {
							limited.Add(1)
						}
					})))
				release := make(chan struct{})
				for range 2 {
					go Do(context.Background(), other, func(ctx context.Context) (int, error) {
						<-release
						return 0, nil
					})
				}
				synctest.Wait()
				var n atomic.Int32
				res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
					n.Add(1)
					time.Sleep(50 * ms)
					if firstFails {
						return 0, errR154Transient
					}
					return 7, nil
				})
				close(release)
				synctest.Wait()
				t.Logf("Do = %v, %v; %d attempts", res, err, n.Load())
				switch {
				case firstFails && !errors.Is(err, errR154Transient):
					t.Errorf("err = %v, want the first attempt's failure", err)
				case !firstFails && (err != nil || res != 7):
					t.Errorf("Do = %v, %v, want the first attempt's 7", res, err)
				}
				if errors.Is(err, limit.ErrLimited) {
					t.Errorf("the call failed with the hedge's refusal: %v", err)
				}
				if limited.Load() != 0 {
					t.Errorf("%d EventLimited for refused hedges", limited.Load())
				}
			})
		})
	}
}

// (4) The quantile follows a dependency that gets slower, then faster,
// through a pipeline whose losers' latencies are samples too; the hedges
// stay within the budget.
func TestReview154QuantileThroughPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		h := hedge.New() // p95, 10%
		p := New(WithHedging(h))
		rng := rand.New(rand.NewPCG(3, 154))
		var rngMu sync.Mutex
		var hedges atomic.Int32
		phase := func(base time.Duration, calls int) (hedged int) {
			before := hedges.Load()
			for range calls {
				// uniform in [base, 2*base), drawn per attempt
				Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedges.Add(1)
					}
					rngMu.Lock()
					d := base + time.Duration(rng.Int64N(int64(base)))
					rngMu.Unlock()
					select {
					case <-time.After(d):
						return 0, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
			}
			synctest.Wait()
			return int(hedges.Load() - before)
		}
		check := func(name string, base time.Duration, hedged, calls int) {
			d, ok := h.After()
			t.Logf("%s: delay %v (%v), %d hedges for %d calls", name, d, ok, hedged, calls)
			if !ok || d < base*3/2 || d > 2*base {
				t.Errorf("%s: delay %v, want about the p95 of [%v, %v)", name, d, base, 2*base)
			}
			if hedged > calls/10+20 {
				t.Errorf("%s: %d hedges for %d calls", name, hedged, calls)
			}
		}
		n := phase(10*ms, 400)
		check("fast", 10*ms, n, 400)
		n = phase(100*ms, 400)
		check("slow", 100*ms, n, 400)
		n = phase(10*ms, 400)
		check("fast again", 10*ms, n, 400)
	})
}

// (2) A hedge that ignores its context's cancellation does not hold its
// call: only the first attempt, which runs on the caller's goroutine, can.
func TestReview154StubbornHedgeDoesNotHold(t *testing.T) {
	for _, budget := range []bool{false, true} {
		t.Run(fmt.Sprint("budget=", budget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms := time.Millisecond
				opts := []Option{WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxExtra(3), hedge.MaxShare(1)))}
				if budget {
					opts = append(opts, WithTimeBudget(50*ms), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
				}
				p := New(opts...)
				a := &r154Attempts{}
				start := time.Now()
				res, err := Do(context.Background(), p, func(ctx context.Context) (*r154Closer, error) {
					c := a.next()
					if p.IsHedge(ctx) {
						time.Sleep(time.Second) // ignores its context
						return c, errR154Transient
					}
					select {
					case <-time.After(35 * ms):
						if budget {
							return c, errR154Transient // keep the race going to the budget
						}
						return c, nil
					case <-ctx.Done():
						return c, ctx.Err()
					}
				}, r154Discard())
				took := time.Since(start)
				want := 35 * ms
				if budget {
					want = 50 * ms
				}
				t.Logf("Do = %v after %v", err, took)
				if took > want {
					t.Errorf("call took %v, want %v: a hedge that ignores its context held it", took, want)
				}
				synctest.Wait()
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if budget {
					a.checkDropped(t, res, 3)
				} else {
					a.check(t, res)
				}
			})
		})
	}
}

// (2) The same without a budget: the caller hangs up at 50ms, after the
// first attempt failed (to retry) at 35ms with a hedge out that is slow
// to heed its cancellation (200ms): the call waits for that hedge.
func TestReview154HedgeHoldsHungUpCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		p := New(WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxShare(1))))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*ms, cancel)
		start := time.Now()
		_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				<-ctx.Done()
				time.Sleep(200 * ms) // slow to heed its cancellation
				return 0, ctx.Err()
			}
			time.Sleep(35 * ms)
			return 0, errR154Transient
		})
		took := time.Since(start)
		t.Logf("Do = %v after %v", err, took)
		if took > 50*ms {
			t.Errorf("call returned %v after start, its caller hung up at 50ms and its first attempt had answered at 35ms", took)
		}
		if err == nil {
			t.Error("Do succeeded: every attempt failed")
		}
		time.Sleep(time.Second) // the hedge heeds its cancellation, behind
		synctest.Wait()
	})
}

// The same in real time, with the pipeline's one timer.
func TestReview154NoHedgeAfterFirstFailedRealTime(t *testing.T) {
	ms := time.Millisecond
	p := New(WithTracer(r154Tracer{endTakes: 20 * ms}),
		WithHedging(hedge.New(hedge.Delay(10*ms), hedge.MaxShare(1))),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
	bad := 0
	const calls = 10
	for range calls {
		var hedges atomic.Int32
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				hedges.Add(1)
				return 2, nil
			}
			time.Sleep(2 * ms)
			return 0, errR154Transient
		})
		if hedges.Load() > 0 {
			bad++
			if bad == 1 {
				t.Logf("Do = %v: a hedge sent after the first attempt failed", err)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d calls sent a hedge after their first attempt had failed (MaxAttempts 1)", bad, calls)
	}
}
