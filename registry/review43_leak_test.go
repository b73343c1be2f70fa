package registry_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review43Heap() uint64 {
	for range 4 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond) // cleanups run on their own goroutine
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func review43WaitNames(t *testing.T, reg *registry.Registry, wantB, wantP int) {
	t.Helper()
	// Each pipeline is forgotten by a cleanup that the collector runs;
	// 20,000 of them under the race detector on a loaded 2-core machine
	// took more than 5 s once (8,193 left).
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		bs, ps := reg.Names()
		if len(bs) <= wantB && len(ps) <= wantP {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still registered: %d breakers, %d pipelines (want %d, %d)", len(bs), len(ps), wantB, wantP)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Pipelines (each with a breaker of its own) registered, called, and
// dropped, round after round: the registry forgets them, and the heap
// does not grow with the rounds.
func TestReview43DroppedPipelinesAreForgotten(t *testing.T) {
	reg := registry.New(registry.Interval(time.Millisecond, 300))
	round := func(r int) {
		for i := range 2000 {
			p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New(fmt.Sprintf("r%d-%d", r, i))), pipeline.WithRetry(retrypolicy.New())))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		}
		_ = reg.Snapshot()
	}
	round(0)
	review43WaitNames(t, reg, 0, 0)
	h0 := review43Heap()
	for r := 1; r <= 5; r++ {
		round(r)
		review43WaitNames(t, reg, 0, 0)
	}
	h1 := review43Heap()
	t.Logf("heap in use: %d KB after the first round, %d KB after 5 more", h0>>10, h1>>10)
	if h1 > h0+8<<20 {
		t.Errorf("heap grew by %d KB over 5 rounds of 2000 pipelines", (h1-h0)>>10)
	}
}

// Pipelines built on one long-lived breaker, registered under names of
// their own and dropped: the breaker keeps no trace of them (its state
// changes cost no more after 20,000 of them than before).
func TestReview43PipelinesOnASharedBreakerAreForgotten(t *testing.T) {
	reg := registry.New()
	b := breaker.New("shared")
	if err := reg.AddBreaker(b); err != nil {
		t.Fatal(err)
	}
	flip := func() time.Duration {
		start := time.Now()
		for range 100 {
			_ = b.SetMode(context.Background(), breaker.ForcedOpen, "t")
			_ = b.SetMode(context.Background(), breaker.Normal, "t")
		}
		return time.Since(start)
	}
	// Keep one registered pipeline so that the breaker has a listener.
	keep, err := reg.AddPipeline(pipeline.New(pipeline.WithName("keep"), pipeline.WithBreaker(b)))
	if err != nil {
		t.Fatal(err)
	}
	before := flip()
	h0 := review43Heap()
	for i := range 20000 {
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(fmt.Sprintf("p%d", i)), pipeline.WithBreaker(b)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	}
	review43WaitNames(t, reg, 1, 1)
	// Each pipeline stops listening to the breaker in a cleanup of its
	// own, which the collector runs in its time, after the registry has
	// forgotten it (Names leaves out one collected at once).
	after := flip()
	for deadline := time.Now().Add(30 * time.Second); after > 20*before+50*time.Millisecond && time.Now().Before(deadline); after = flip() {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	h1 := review43Heap()
	t.Logf("200 mode changes: %v before, %v after 20,000 pipelines came and went; heap %d KB -> %d KB", before, after, h0>>10, h1>>10)
	if after > 20*before+50*time.Millisecond {
		t.Errorf("state changes cost %v after, %v before", after, before)
	}
	if h1 > h0+8<<20 {
		t.Errorf("heap grew by %d KB", (h1-h0)>>10)
	}
	runtime.KeepAlive(keep)
}

// A name freed by RemovePipeline and taken by another pipeline stays the
// new one's when the old one is collected; likewise for breakers.
func TestReview43ANameReusedStaysTheNewOnes(t *testing.T) {
	reg := registry.New()
	func() {
		old, err := reg.AddPipeline(pipeline.New(pipeline.WithName("x")))
		if err != nil {
			t.Fatal(err)
		}
		_ = old
		if !reg.RemovePipeline("x") {
			t.Fatal("not removed")
		}
		ob := breaker.New("b")
		if err := reg.AddBreaker(ob); err != nil {
			t.Fatal(err)
		}
		if !reg.RemoveBreaker("b") {
			t.Fatal("not removed")
		}
	}()
	nw, err := reg.AddPipeline(pipeline.New(pipeline.WithName("x")))
	if err != nil {
		t.Fatal(err)
	}
	nb := breaker.New("b")
	if err := reg.AddBreaker(nb); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	bs, ps := reg.Names()
	if len(bs) != 1 || len(ps) != 1 {
		t.Errorf("names after the old ones were collected: %v %v", bs, ps)
	}
	runtime.KeepAlive(nw)
	runtime.KeepAlive(nb)
}

// Register, remove, drop, snapshot, force and call, all at once, under
// -race: no panic, no race; each Snapshot is sorted and consistent.
func TestReview43ConcurrentRegistryUse(t *testing.T) {
	reg := registry.New(registry.Interval(time.Millisecond, 50))
	var stop atomic.Bool
	var wg sync.WaitGroup
	down := errors.New("down")
	shared := breaker.New("shared", breaker.ConsecutiveFailures(3))
	_ = reg.AddBreaker(shared)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("p%d", i%7)
				var opts []pipeline.Option
				if i%2 == 0 {
					opts = append(opts, pipeline.WithBreaker(shared), pipeline.WithName(name))
				} else {
					opts = append(opts, pipeline.WithBreaker(breaker.New(fmt.Sprintf("b%d-%d", g, i%5))))
				}
				p, err := reg.AddPipeline(pipeline.New(append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.WithSleep(func(context.Context, time.Duration) error { return nil }))))...))
				if err != nil {
					if !errors.Is(err, registry.ErrDuplicate) {
						t.Error(err)
					}
					continue
				}
				for j := range 20 {
					_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
						if j%4 == 0 {
							return 0, down
						}
						return 1, nil
					})
				}
				if i%3 == 0 {
					reg.RemovePipeline(p.Stages().Name)
				}
				if i%50 == 0 {
					runtime.GC()
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			s := reg.Snapshot()
			for i := 1; i < len(s.Pipelines); i++ {
				if s.Pipelines[i-1].Name >= s.Pipelines[i].Name {
					t.Errorf("pipelines not sorted or duplicate: %q %q", s.Pipelines[i-1].Name, s.Pipelines[i].Name)
				}
			}
			for _, p := range s.Pipelines {
				if p.Successes+p.Failures > p.Calls {
					t.Errorf("%s: %d successes + %d failures > %d calls", p.Name, p.Successes, p.Failures, p.Calls)
				}
			}
		}
	})
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			m := []breaker.Mode{breaker.ForcedOpen, breaker.Normal, breaker.Disabled, breaker.ForcedClosed}[i%4]
			_ = reg.SetMode(context.Background(), "shared", m, "t")
			reg.Names()
			time.Sleep(100 * time.Microsecond)
		}
	})
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	_ = reg.SetMode(context.Background(), "shared", breaker.Normal, "t")
}
