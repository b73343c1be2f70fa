package breaker_test

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

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type recL struct {
	mu  sync.Mutex
	evs []resilience.Event
}

func (r *recL) OnEvent(e resilience.Event) {
	if e.Kind != resilience.EventStateChange {
		return
	}
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recL) changes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.evs {
		out = append(out, e.From.String()+">"+e.To.String())
	}
	return out
}

func openIt(t *testing.T, b *breaker.Breaker, n int) {
	for range n {
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
	}
	if b.State() != resilience.StateOpen {
		t.Fatalf("not open: %v", b.State())
	}
}

// A half-open probe that panics counts neither way: the breaker stays
// half-open with the probe's slot free, the panic goes on, the breaker is
// not left locked, and the next call's success closes it.
func TestReviewProbePanicFreesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &recL{}
		b := breaker.New("x", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Second), breaker.WithListener(l))
		openIt(t, b, 2)
		time.Sleep(1001 * time.Millisecond)
		var rec any
		func() {
			defer func() { rec = recover() }()
			_ = b.Execute(context.Background(), func(context.Context) error { panic("probe") })
		}()
		if rec != "probe" {
			t.Errorf("panic went as %v", rec)
		}
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("state %v after a panicking probe", b.State())
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("the next probe: %v", err)
		}
		want := []string{"closed>open", "open>half-open", "half-open>closed"}
		if got := l.changes(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("changes %v, want %v", got, want)
		}
	})
}

// runtime.Goexit in a probe: not counted, the Goexit goes on (deferred
// functions run, the goroutine ends), the breaker stays half-open, and
// the next calls probe.
func TestReviewProbeGoexitFreesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &recL{}
		b := breaker.New("x", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(2), breaker.WithListener(l))
		openIt(t, b, 2)
		time.Sleep(1001 * time.Millisecond)
		done := make(chan bool)
		go func() {
			after := false
			defer func() { done <- after }()
			_ = b.Execute(context.Background(), func(context.Context) error { runtime.Goexit(); return nil })
			after = true
		}()
		if <-done {
			t.Errorf("Execute returned after a Goexit")
		}
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("state %v after a Goexit probe", b.State())
		}
		for range 2 { // HalfOpenRequests(2): both slots free
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Errorf("a probe: %v", err)
			}
		}
		want := []string{"closed>open", "open>half-open", "half-open>closed"}
		if got := l.changes(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("changes %v, want %v", got, want)
		}
	})
}

// HalfOpenRequests(3), 20 callers at once in the half-open state: exactly
// 3 run, 17 are told busy; 3 successes close.
func TestReviewHalfOpenAdmitsExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(3))
		openIt(t, b, 1)
		time.Sleep(2 * time.Second)
		release := make(chan struct{})
		var ran, busy atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				err := b.Execute(context.Background(), func(context.Context) error { ran.Add(1); <-release; return nil })
				if errors.Is(err, breaker.ErrTooManyRequests) {
					busy.Add(1)
				}
			})
		}
		synctest.Wait()
		if ran.Load() != 3 || busy.Load() != 17 {
			t.Errorf("ran %d busy %d, want 3 and 17", ran.Load(), busy.Load())
		}
		close(release)
		wg.Wait()
		if b.State() != resilience.StateClosed {
			t.Errorf("state %v", b.State())
		}
	})
}

// Calls admitted while closed, ending after the breaker opened and went
// half-open, count for nothing: their successes do not close it.
func TestReviewStaleSuccessesDoNotClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		var olds []*pending
		for range 5 {
			olds = append(olds, startRK(b))
		}
		startRK(b).finish(errBoom)
		time.Sleep(2 * time.Second)
		if b.State() != resilience.StateHalfOpen {
			t.Fatalf("state %v", b.State())
		}
		probe := startRK(b)
		for _, p := range olds {
			p.finish(nil)
		}
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("stale successes moved the breaker to %v", b.State())
		}
		probe.finish(nil)
		if b.State() != resilience.StateClosed {
			t.Errorf("state %v", b.State())
		}
	})
}

// Many goroutines, real time, under -race: successes, failures, panics,
// Goexits and cancellations. The listener's changes form a chain (each
// From the last To, no self-change), match the breaker's transitions, and
// Counts stay consistent.
func TestReviewConcurrentStorm(t *testing.T) {
	t.Run("4 buckets", func(t *testing.T) { storm(t, 20*time.Millisecond, 4, 3) })
	t.Run("1 bucket", func(t *testing.T) { storm(t, 2*time.Millisecond, 1, 100) })
	t.Run("100 buckets", func(t *testing.T) { storm(t, 100*time.Millisecond, 100, 3) })
}

func storm(t *testing.T, window time.Duration, buckets int, consec uint32) {
	l := &recL{}
	b := breaker.New("x", breaker.ConsecutiveFailures(consec), breaker.FailureRate(0.5, 4), breaker.Window(window, buckets),
		breaker.OpenTimeout(time.Millisecond), breaker.HalfOpenRequests(2), breaker.WithListener(l))
	var bad atomic.Value
	var wg sync.WaitGroup
	deadline := time.Now().Add(700 * time.Millisecond)
	for g := range 48 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(deadline) {
				k := r.IntN(20)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					ctx := context.Background()
					if k == 0 {
						c, cancel := context.WithCancel(ctx)
						ctx = c
						defer cancel()
						go cancel()
					}
					_ = b.Execute(ctx, func(ctx context.Context) error {
						if r := time.Duration(k%3) * 100 * time.Microsecond; r > 0 {
							time.Sleep(r)
						}
						switch {
						case k == 1:
							panic("x")
						case k == 2:
							runtime.Goexit()
						case k < 9:
							return errBoom
						case k == 9:
							return context.Canceled
						}
						return nil
					})
				}()
				<-done
				c := b.Counts()
				if c.TotalSuccesses+c.TotalFailures+c.TotalExclusions > c.Requests {
					bad.Store(fmt.Sprintf("counts: outcomes over requests: %+v", c))
				}
				if c.ConsecutiveFailures > c.TotalFailures || c.ConsecutiveSuccesses > c.TotalSuccesses {
					bad.Store(fmt.Sprintf("counts: run over total: %+v", c))
				}
			}
		})
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Error(v)
	}
	tr := b.Snapshot().Transitions // before the listener's copy: Snapshot may move the state on
	ch := l.changes()
	if len(ch) < 10 {
		t.Errorf("only %d changes", len(ch))
	}
	l.mu.Lock()
	prev := resilience.StateClosed
	for i, e := range l.evs {
		if e.From != prev || e.From == e.To {
			t.Errorf("change %d: %v>%v after %v", i, e.From, e.To, prev)
			break
		}
		prev = e.To
	}
	l.mu.Unlock()
	var hist []string
	for _, x := range tr {
		hist = append(hist, x.From.String()+">"+x.To.String())
	}
	found := false
	for off := 0; off <= 2 && len(ch)-len(hist)-off >= 0; off++ {
		if fmt.Sprint(ch[len(ch)-len(hist)-off:len(ch)-off]) == fmt.Sprint(hist) {
			found = true
		}
	}
	if !found {
		t.Errorf("transitions %v not the listener's last changes %v", hist, ch[max(0, len(ch)-18):])
	}
	t.Logf("%d state changes", len(ch))
}
