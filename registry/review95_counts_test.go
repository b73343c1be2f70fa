package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func r95State(t *testing.T, r *registry.Registry, p *pipeline.Pipeline, name string) registry.PipelineState {
	// The registry forgets a pipeline nothing references: p stays alive until the snapshot is read.
	defer runtime.KeepAlive(p)
	t.Helper()
	for _, p := range r.Snapshot().Pipelines {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pipeline %q", name)
	return registry.PipelineState{}
}

func r95Sum(s registry.PipelineState) uint64 {
	return s.Successes + s.Failures + s.Rejected + s.Throttled + s.Limited
}

// Many goroutines, a breaker that opens and closes, retries, a throttle
// and a limit, operations that succeed, fail, panic or call Goexit: the
// calls are counted exactly, successes and failures exactly (a call
// failed if it sent an attempt and did not succeed: its retry refused
// too), and each call counts in one of success, failure, rejection,
// throttled, limited at least.
func TestReview95CountsUnderLoad(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprint("hedged=", hedged), func(t *testing.T) {
			r := registry.New()
			b := breaker.New("dep95", breaker.ConsecutiveFailures(20), breaker.OpenTimeout(2*time.Millisecond))
			opts := []pipeline.Option{pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(100*time.Microsecond))),
				pipeline.WithThrottle(throttle.New()), pipeline.WithLimit(limit.NewFixed(8, limit.MaxWaiting(4)))}
			if hedged {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(200*time.Microsecond), hedge.MaxShare(0.5))))
			}
			p, err := r.AddPipeline(pipeline.New(opts...))
			if err != nil {
				t.Fatal(err)
			}
			var calls, oks, failedSent atomic.Uint64
			stop := make(chan struct{})
			var snaps sync.WaitGroup
			snaps.Go(func() {
				var last registry.PipelineState
				for {
					select {
					case <-stop:
						return
					default:
					}
					s := r95State(t, r, p, "dep95")
					if s.Calls < last.Calls || s.Attempts < last.Attempts || s.Successes < last.Successes || s.Retries < last.Retries ||
						s.Rejected < last.Rejected || s.Throttled < last.Throttled || s.Limited < last.Limited || s.Hedged < last.Hedged {
						t.Errorf("a count went backwards: %+v then %+v", last, s)
					}
					if s.Successes > s.Calls || s.Attempts < s.Successes {
						t.Errorf("inconsistent snapshot: %+v", s)
					}
					last = s
					time.Sleep(100 * time.Microsecond)
				}
			})
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					_ = g
					for range 400 {
						calls.Add(1)
						done := make(chan struct{})
						var sent atomic.Bool
						go func() {
							defer close(done)
							ok := false
							defer func() {
								recover()
								if !ok && sent.Load() { // its last attempt sent failed, panicked or exited
									failedSent.Add(1)
								}
							}()
							_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
								sent.Store(true)
								switch x := rand.IntN(100); {
								case x < 2:
									panic("op panics")
								case x < 4:
									runtime.Goexit()
								case x < 35:
									time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
									return 0, errors.New("down")
								}
								time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
								return 1, nil
							})
							if err == nil {
								ok = true
								oks.Add(1)
							}
						}()
						<-done
					}
				})
			}
			wg.Wait()
			close(stop)
			snaps.Wait()
			time.Sleep(50 * time.Millisecond) // hedges left behind
			s := r95State(t, r, p, "dep95")
			t.Logf("%+v", s)
			if s.Calls != calls.Load() {
				t.Errorf("Calls %d, made %d", s.Calls, calls.Load())
			}
			if s.Successes != oks.Load() {
				t.Errorf("Successes %d, calls that succeeded %d", s.Successes, oks.Load())
			}
			if s.Failures != failedSent.Load() {
				t.Errorf("Failures %d, calls that sent an attempt and did not succeed %d", s.Failures, failedSent.Load())
			}
			if r95Sum(s) < s.Calls { // a call refused at its retry counts as a failure and a refusal
				t.Errorf("successes+failures+rejected+throttled+limited = %d, calls %d", r95Sum(s), s.Calls)
			}
			if s.Rejected+s.Throttled+s.Limited > s.Calls-s.Successes {
				t.Errorf("more rejections (%d) than calls that did not succeed (%d)", s.Rejected+s.Throttled+s.Limited, s.Calls-s.Successes)
			}
		})
	}
}

// A call admitted by the breaker whose attempt waits in the limit's queue
// while the breaker opens is refused as its slot comes (the breaker's
// re-check): not sent. Is the call counted as a rejection, with and
// without hedging, and a retry's refusal not counted twice?
type r95Tracer struct{}

func (r95Tracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, r95Trace{}
}

type r95Trace struct{}

func (r95Trace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) {}
}
func (r95Trace) End(error) {}

var r95WithTracer bool

func r95Reopened(t *testing.T, hedged, retryFirst bool) registry.PipelineState {
	r := registry.New()
	b := breaker.New("re95", breaker.ConsecutiveFailures(1000))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithLimit(lim),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
	if hedged {
		opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour))))
	}
	if r95WithTracer {
		opts = append(opts, pipeline.WithTracer(r95Tracer{}))
	}
	p, err := r.AddPipeline(pipeline.New(opts...))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	holding := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // A holds the only slot
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			close(holding)
			<-release
			return 1, nil
		})
	})
	<-holding
	var bErr error
	wg.Go(func() { // B: first attempt fails at once (if retryFirst), its retry queues
		n := 0
		_, bErr = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			return 0, errors.New("down")
		})
	})
	if retryFirst {
		// B's first attempt must queue too unless it is the retry that
		// queues; free the slot for B's first attempt, then hold it again.
	}
	// wait for B to queue
	for lim.Waiting() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	if err := b.SetMode(context.Background(), breaker.ForcedOpen, "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	t.Logf("B: %v", bErr)
	return r95State(t, r, p, "re95")
}

func TestReview95ReopenedFirstAttempt(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		s := r95Reopened(t, hedged, false)
		t.Logf("hedged=%v: %+v", hedged, s)
		if r95Sum(s) != s.Calls {
			t.Errorf("hedged=%v: successes+failures+rejected+throttled+limited = %d, calls %d", hedged, r95Sum(s), s.Calls)
		}
	}
}

// B's first attempt fails; during its backoff A takes the only slot; B's
// retry queues; the breaker opens; A frees the slot: B's retry is refused
// by the breaker's re-check. Doc: "a call whose retry was refused so
// counts as that rejection, not as a failure": counted once?
func r95ReopenedRetry(t *testing.T, hedged bool) registry.PipelineState {
	r := registry.New()
	b := breaker.New("rr95", breaker.ConsecutiveFailures(1000))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithLimit(lim),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(30*time.Millisecond), retrypolicy.Jitter(retrypolicy.None)))}
	if hedged {
		opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour))))
	}
	p, err := r.AddPipeline(pipeline.New(opts...))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var bErr error
	failed := make(chan struct{})
	wg.Go(func() {
		first := true
		_, bErr = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			if first {
				first = false
				defer close(failed)
			}
			return 0, errors.New("down")
		})
	})
	<-failed
	release := make(chan struct{})
	holding := make(chan struct{})
	wg.Go(func() {
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			close(holding)
			<-release
			return 1, nil
		})
	})
	<-holding
	deadline := time.Now().Add(2 * time.Second)
	for lim.Waiting() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if lim.Waiting() == 0 {
		t.Fatal("B's retry never queued")
	}
	if err := b.SetMode(context.Background(), breaker.ForcedOpen, "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	t.Logf("B: %v", bErr)
	return r95State(t, r, p, "rr95")
}

func TestReview95ReopenedRetry(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		s := r95ReopenedRetry(t, hedged)
		t.Logf("hedged=%v: %+v", hedged, s)
		// The registry doc: B counts as a failure, its last attempt's, and
		// the refusal of its retry as one of Rejected, hedged or not.
		if s.Successes != 1 || s.Failures != 1 || s.Rejected != 1 {
			t.Errorf("hedged=%v: successes %d, failures %d, rejected %d; want 1, 1, 1", hedged, s.Successes, s.Failures, s.Rejected)
		}
	}
}

func TestReview95ReopenedFirstAttemptTraced(t *testing.T) {
	r95WithTracer = true
	defer func() { r95WithTracer = false }()
	s := r95Reopened(t, false, false)
	t.Logf("traced: %+v", s)
	if r95Sum(s) != s.Calls {
		t.Errorf("traced: successes+failures+rejected+throttled+limited = %d, calls %d", r95Sum(s), s.Calls)
	}
}

// A hedge refused by the limit (it never waits) of a call that succeeds:
// is the successful call also counted as Limited (a rejection in the
// series)?
func TestReview95RefusedHedgeOfASuccess(t *testing.T) {
	r := registry.New()
	p, _ := r.AddPipeline(pipeline.New(pipeline.WithName("rh95"), pipeline.WithLimit(limit.NewFixed(1)),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1)))))
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
		time.Sleep(20 * time.Millisecond)
		return 1, nil
	})
	s := r95State(t, r, p, "rh95")
	t.Logf("err %v: %+v", err, s)
	if r95Sum(s) != s.Calls {
		t.Errorf("one successful call: successes %d, limited %d (sum %d, calls %d)", s.Successes, s.Limited, r95Sum(s), s.Calls)
	}
}
