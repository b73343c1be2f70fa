package registry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r95Panicky struct{ heard atomic.Int64 }

func (p *r95Panicky) maybe() {
	if rand.IntN(4) == 0 {
		panic("listener fault")
	}
}
func (p *r95Panicky) Wants(resilience.EventKind) bool { p.maybe(); return true }
func (p *r95Panicky) TimeCall() bool                  { p.maybe(); return rand.IntN(2) == 0 }
func (p *r95Panicky) OnEvent(e resilience.Event) {
	p.heard.Add(1)
	p.maybe()
}

// The registry's counts with another listener that panics at random in
// Wants, TimeCall and OnEvent: exact, and the calls' results unchanged.
func TestReview95CountsWithPanickyListener(t *testing.T) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer slog.SetDefault(old)
	r := registry.New()
	pl := &r95Panicky{}
	b := breaker.New("pk95", breaker.ConsecutiveFailures(1000))
	p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(pl),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond)))))
	if err != nil {
		t.Fatal(err)
	}
	var calls, oks, wrong atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 2000 {
				calls.Add(1)
				fail := rand.IntN(3) == 0
				_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					if fail {
						return 0, errors.New("down")
					}
					return 1, nil
				})
				if err == nil {
					oks.Add(1)
				}
				if (err == nil) == fail {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := r95State(t, r, p, "pk95")
	t.Logf("%+v; listener heard %d", s, pl.heard.Load())
	if wrong.Load() != 0 {
		t.Errorf("%d calls had the wrong outcome", wrong.Load())
	}
	if s.Calls != uint64(calls.Load()) || s.Successes != uint64(oks.Load()) || s.Failures != uint64(calls.Load()-oks.Load()) {
		t.Errorf("calls %d/%d successes %d/%d failures %d/%d", s.Calls, calls.Load(), s.Successes, oks.Load(), s.Failures, calls.Load()-oks.Load())
	}
	if s.Attempts != uint64(oks.Load())+3*uint64(calls.Load()-oks.Load()) {
		t.Errorf("attempts %d", s.Attempts)
	}
}
