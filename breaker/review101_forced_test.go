package breaker_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// Forced closed: snapshots taken while calls start and end, succeed, fail,
// panic and Goexit never show more outcomes than requests, a failure rate
// above 1, or counts that go backwards; at the end the counts are exact.
func TestReview101ForcedClosedCountsUnderLoad(t *testing.T) {
	b := breaker.New("fc", breaker.ConsecutiveFailures(1))
	ctx := context.Background()
	if err := b.SetMode(ctx, breaker.ForcedClosed, "t"); err != nil {
		t.Fatal(err)
	}
	var ok, bad, excl atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (i + g) % 5 {
				case 0:
					_ = b.Execute(ctx, func(context.Context) error { return errors.New("boom") })
					bad.Add(1)
				case 1:
					func() {
						defer func() { recover() }()
						_ = b.Execute(ctx, func(context.Context) error { panic("x") })
					}()
					excl.Add(1)
				case 2:
					d := make(chan struct{})
					go func() {
						defer close(d)
						_ = b.Execute(ctx, func(context.Context) error { runtime.Goexit(); return nil })
					}()
					<-d
					excl.Add(1)
				default:
					_ = b.Execute(ctx, func(context.Context) error { runtime.Gosched(); return nil })
					ok.Add(1)
				}
			}
		})
	}
	var last breaker.Counts
	for range 20000 {
		s := b.Snapshot()
		c := s.Counts
		if uint64(c.TotalSuccesses)+uint64(c.TotalFailures)+uint64(c.TotalExclusions) > uint64(c.Requests) {
			t.Fatalf("outcomes over requests: %+v", c)
		}
		if s.FailureRate > 1 || s.FailureRate < 0 {
			t.Fatalf("failure rate %v", s.FailureRate)
		}
		if c.Requests < last.Requests || c.TotalSuccesses < last.TotalSuccesses || c.TotalFailures < last.TotalFailures || c.TotalExclusions < last.TotalExclusions {
			t.Fatalf("went backwards: %+v then %+v", last, c)
		}
		last = c
	}
	close(stop)
	wg.Wait()
	c := b.Snapshot().Counts
	if uint64(c.TotalSuccesses) != ok.Load() || uint64(c.TotalFailures) != bad.Load() || uint64(c.TotalExclusions) != excl.Load() ||
		uint64(c.Requests) != ok.Load()+bad.Load()+excl.Load() {
		t.Errorf("counts %+v; want ok %d failed %d excluded %d", c, ok.Load(), bad.Load(), excl.Load())
	}
	if b.State().String() != "closed" {
		t.Errorf("state %v", b.State())
	}
}
