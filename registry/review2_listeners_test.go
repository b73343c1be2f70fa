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
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r2rec records what a listener heard, and what it should not have.
type r2rec struct {
	name       string
	mu         sync.Mutex
	wants      map[resilience.EventKind]bool // nil: every kind
	timer      bool                          // a CallTimer
	timeCall   func() bool
	panicEvent bool
	panicWants bool
	panicTime  bool

	done, untimed, timed atomic.Int64
	rejected0            atomic.Int64
	violations           []string
}

func (r *r2rec) violate(s string) {
	r.mu.Lock()
	r.violations = append(r.violations, s)
	r.mu.Unlock()
}

func (r *r2rec) onEvent(e resilience.Event) {
	if r.wants != nil && !r.wants[e.Kind] {
		r.violate(fmt.Sprintf("%s heard %v it does not want", r.name, e.Kind))
	}
	if e.Kind == resilience.EventCallDone {
		r.done.Add(1)
		if e.Untimed {
			r.untimed.Add(1)
			if !r.timer {
				r.violate(r.name + " (no CallTimer) heard an Untimed call end")
			}
			if e.Duration != 0 {
				r.violate(r.name + " heard an Untimed call end with a Duration")
			}
		} else {
			r.timed.Add(1)
			if e.Duration <= 0 {
				r.violate(fmt.Sprintf("%s heard a timed call end with Duration %v", r.name, e.Duration))
			}
		}
	}
	if e.Kind == resilience.EventRejected && e.Attempt == 0 {
		r.rejected0.Add(1)
	}
	if r.panicEvent {
		panic("listener " + r.name)
	}
}

func (r *r2rec) wantsKind(k resilience.EventKind) bool {
	if r.panicWants && k == resilience.EventCallDone {
		panic("wants " + r.name)
	}
	return r.wants == nil || r.wants[k]
}

type r2plain struct{ *r2rec }

func (p r2plain) OnEvent(e resilience.Event) { p.onEvent(e) }

type r2filter struct{ *r2rec }

func (p r2filter) OnEvent(e resilience.Event)        { p.onEvent(e) }
func (p r2filter) Wants(k resilience.EventKind) bool { return p.wantsKind(k) }

type r2timer struct{ *r2rec }

func (p r2timer) OnEvent(e resilience.Event)        { p.onEvent(e) }
func (p r2timer) Wants(k resilience.EventKind) bool { return p.wantsKind(k) }
func (p r2timer) TimeCall() bool {
	if p.panicTime {
		panic("timecall " + p.name)
	}
	return p.timeCall()
}

var r2errTransient = errors.New("transient")

// TestReview2ListenerInvariants runs random pipelines with random sets of
// listeners, the registry's among them, and checks the promises: every
// listener that wants the end of a call hears it once a call; Untimed
// ends only reach CallTimers; the registry counts every call once; a
// panicking listener changes no outcome.
func TestReview2ListenerInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 28))
	for round := range 120 {
		var recs []*r2rec
		var ls []resilience.Listener
		nl := 1 + rng.IntN(4)
		for i := range nl {
			r := &r2rec{name: fmt.Sprintf("r%d.%d", round, i)}
			if rng.IntN(3) == 0 {
				r.wants = map[resilience.EventKind]bool{}
				for k := resilience.EventAttempt; k <= resilience.EventWaitOpen; k++ {
					r.wants[k] = rng.IntN(2) == 0
				}
			}
			r.panicEvent = rng.IntN(6) == 0
			switch rng.IntN(3) {
			case 0:
				if r.wants != nil {
					ls = append(ls, r2filter{r})
				} else {
					ls = append(ls, r2plain{r})
				}
			case 1:
				if r.wants == nil {
					r.wants = map[resilience.EventKind]bool{}
					for k := resilience.EventAttempt; k <= resilience.EventWaitOpen; k++ {
						r.wants[k] = true
					}
				}
				r.panicWants = rng.IntN(8) == 0
				ls = append(ls, r2filter{r})
			default:
				r.timer = true
				if r.wants == nil {
					r.wants = map[resilience.EventKind]bool{}
					for k := resilience.EventAttempt; k <= resilience.EventWaitOpen; k++ {
						r.wants[k] = true
					}
				}
				r.panicWants = rng.IntN(8) == 0
				r.panicTime = rng.IntN(8) == 0
				every := 1 + rng.IntN(4)
				r.timeCall = func() bool { return rand.IntN(every) == 0 }
				ls = append(ls, r2timer{r})
			}
			recs = append(recs, r)
		}
		name := fmt.Sprintf("dep%d", round)
		opts := []pipeline.Option{pipeline.WithName(name)}
		var b *breaker.Breaker
		if rng.IntN(2) == 0 {
			var bopts []breaker.Option
			if rng.IntN(2) == 0 { // some listeners given to the breaker too
				for _, l := range ls {
					if rng.IntN(2) == 0 {
						bopts = append(bopts, breaker.WithListener(l))
					}
				}
			}
			bopts = append(bopts, breaker.ConsecutiveFailures(3), breaker.OpenTimeout(5*time.Millisecond))
			b = breaker.New(name+"-b", bopts...)
			opts = append(opts, pipeline.WithBreaker(b))
			if rng.IntN(3) == 0 {
				opts = append(opts, pipeline.WaitWhenOpen())
			}
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))))
		}
		if rng.IntN(3) == 0 {
			opts = append(opts, pipeline.WithTimeBudget(time.Second))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, pipeline.WithAttemptTimeout(time.Second))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Microsecond), hedge.MaxShare(1))))
		}
		for _, l := range ls {
			opts = append(opts, pipeline.WithListener(l))
		}
		withReg := rng.IntN(2) == 0
		p := pipeline.New(opts...)
		var reg *registry.Registry
		if withReg {
			reg = registry.New()
			var err error
			if p, err = reg.AddPipeline(p); err != nil {
				t.Fatal(err)
			}
			defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
		}
		const calls = 60
		for i := range calls {
			fail := rng.IntN(3)
			sleep := rng.IntN(3) == 0
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if sleep {
					time.Sleep(300 * time.Microsecond)
				}
				switch fail {
				case 0:
					return i, nil
				case 1:
					return 0, r2errTransient
				}
				return 0, resilience.Permanent(errors.New("permanent"))
			})
			_ = err
		}
		time.Sleep(5 * time.Millisecond) // losers of hedges
		desc := fmt.Sprintf("round %d: %d listeners, breaker %v, reg %v, opts %d", round, nl, b != nil, withReg, len(opts))
		for _, r := range recs {
			r.mu.Lock()
			for _, v := range r.violations {
				t.Errorf("%s: %s", desc, v)
			}
			r.mu.Unlock()
			wantsDone := r.wants == nil || r.wants[resilience.EventCallDone]
			if r.panicWants {
				continue // its Wants panics: a no
			}
			if wantsDone && r.done.Load() != calls {
				t.Errorf("%s: %s heard %d call ends of %d", desc, r.name, r.done.Load(), calls)
			}
		}
		if reg != nil {
			s := reg.Snapshot()
			for _, ps := range s.Pipelines {
				if ps.Name == name && ps.Calls != calls {
					t.Errorf("%s: the registry counted %d calls of %d", desc, ps.Calls, calls)
				}
			}
		}
	}
}

// TestReview2RejectionsOnceWithBothBreakerAndPipeline: listeners given to
// the breaker and to the pipeline (and the registry) hear each rejection
// once, and each call's end once.
func TestReview2RejectionsOnceWithBothBreakerAndPipeline(t *testing.T) {
	plain := &r2rec{name: "plain"}
	tm := &r2rec{name: "timer", timer: true, timeCall: func() bool { return false }}
	b := breaker.New("shared-b", breaker.WithListener(r2plain{plain}), breaker.WithListener(r2timer{tm}))
	if err := b.SetMode(context.Background(), breaker.ForcedOpen, "test"); err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.WithName("shared"), pipeline.WithBreaker(b), pipeline.WithListener(r2plain{plain}), pipeline.WithListener(r2timer{tm}),
		pipeline.WithRetry(retrypolicy.New()))
	reg := registry.New()
	p, err := reg.AddPipeline(p)
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	const calls = 10
	for range calls {
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("err %v", err)
		}
	}
	for _, r := range []*r2rec{plain, tm} {
		if r.rejected0.Load() != calls {
			t.Errorf("%s heard %d rejections of %d calls", r.name, r.rejected0.Load(), calls)
		}
		if r.done.Load() != calls {
			t.Errorf("%s heard %d call ends of %d calls", r.name, r.done.Load(), calls)
		}
		for _, v := range r.violations {
			t.Error(v)
		}
	}
	for _, ps := range reg.Snapshot().Pipelines {
		if ps.Calls != calls || ps.Rejected != calls {
			t.Errorf("registry: calls %d rejected %d, want %d", ps.Calls, ps.Rejected, calls)
		}
	}
}

// A listener made by breaker.Unheard (a fan-out of the toolkit's, public)
// given to a pipeline with the registry: nested listeners keep the
// promises.
func TestReview2NestedUnheard(t *testing.T) {
	tm := &r2rec{name: "timer", timer: true, timeCall: func() bool { return false }, wants: map[resilience.EventKind]bool{resilience.EventCallDone: true}}
	pf := &r2rec{name: "filter", wants: map[resilience.EventKind]bool{resilience.EventAttempt: true}}
	other := breaker.New("other")
	nested := other.Unheard(r2timer{tm})
	nested2 := other.Unheard(r2filter{pf})
	p := pipeline.New(pipeline.WithName("nested"), pipeline.WithListener(nested), pipeline.WithListener(nested2),
		pipeline.WithBreaker(breaker.New("nb")), pipeline.WithRetry(retrypolicy.New()))
	reg := registry.New()
	p, err := reg.AddPipeline(p)
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	const calls = 500
	for range calls {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	}
	for _, r := range []*r2rec{tm, pf} {
		for _, v := range r.violations {
			t.Error(v)
		}
	}
	if tm.done.Load() != calls {
		t.Errorf("timer heard %d ends of %d", tm.done.Load(), calls)
	}
	if tm.untimed.Load() == 0 || tm.timed.Load() == 0 {
		t.Errorf("timer: %d untimed, %d timed (the registry's sample)", tm.untimed.Load(), tm.timed.Load())
	}
	for _, ps := range reg.Snapshot().Pipelines {
		if ps.Calls != calls || ps.Attempts != calls {
			t.Errorf("registry calls %d attempts %d", ps.Calls, ps.Attempts)
		}
		if ps.P50 == 0 {
			t.Errorf("registry has no timed call")
		}
	}
}

type r2states struct{ n atomic.Int64 }

func (s *r2states) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventStateChange {
		s.n.Add(1)
	}
}
func (s *r2states) Wants(k resilience.EventKind) bool { return true }
func (s *r2states) TimeCall() bool                    { return false }

// A listener given to a breaker and to two pipelines on it (one
// registered) hears each state change once.
func TestReview2StateChangesOnce(t *testing.T) {
	l := &r2states{}
	b := breaker.New("sc", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour), breaker.WithListener(l))
	p1 := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	reg := registry.New()
	p2, err := reg.AddPipeline(pipeline.New(pipeline.WithName("sc2"), pipeline.WithBreaker(b), pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pipeline.Do(context.Background(), p1, func(context.Context) (int, error) { return 0, errors.New("x") })
	_, _ = pipeline.Do(context.Background(), p2, func(context.Context) (int, error) { return 0, nil })
	if got := l.n.Load(); got != 1 {
		t.Errorf("heard %d state changes, want 1", got)
	}
	l2 := &r2states{}
	b2 := breaker.New("sc3", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	q1 := pipeline.New(pipeline.WithBreaker(b2), pipeline.WithListener(l2))
	q2, err := reg.AddPipeline(pipeline.New(pipeline.WithName("sc4"), pipeline.WithBreaker(b2), pipeline.WithListener(l2)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pipeline.Do(context.Background(), q2, func(context.Context) (int, error) { return 0, errors.New("x") })
	_ = q1
	if got := l2.n.Load(); got != 1 {
		t.Errorf("without the breaker's: heard %d state changes, want 1", got)
	}
}

// Concurrent calls through a pipeline with a sampled CallTimer, a plain
// listener not wanting call ends, and the registry: every call's end
// heard once by the timer, counted once by the registry.
func TestReview2ConcurrentCounts(t *testing.T) {
	tm := &r2rec{name: "timer", timer: true, timeCall: func() bool { return rand.IntN(5) == 0 }}
	pf := &r2rec{name: "filter", wants: map[resilience.EventKind]bool{resilience.EventRetry: true}}
	p := pipeline.New(pipeline.WithName("conc"), pipeline.WithListener(r2timer{tm}), pipeline.WithListener(r2filter{pf}),
		pipeline.WithBreaker(breaker.New("conc-b", breaker.ConsecutiveFailures(1000))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Microsecond), hedge.MaxShare(1))))
	reg := registry.New()
	p, err := reg.AddPipeline(p)
	defer runtime.KeepAlive(p) // the registry forgets a pipeline nothing references
	if err != nil {
		t.Fatal(err)
	}
	const g, each = 4, 300
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for i := range each {
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if i%7 == 0 {
						time.Sleep(100 * time.Microsecond)
					}
					if i%5 == 0 {
						return 0, r2errTransient
					}
					return 1, nil
				})
			}
		})
	}
	wg.Wait()
	for _, r := range []*r2rec{tm, pf} {
		for _, v := range r.violations {
			t.Error(v)
		}
	}
	if tm.done.Load() != g*each {
		t.Errorf("timer heard %d ends of %d", tm.done.Load(), g*each)
	}
	for _, ps := range reg.Snapshot().Pipelines {
		if ps.Calls != g*each {
			t.Errorf("registry calls %d", ps.Calls)
		}
	}
}
