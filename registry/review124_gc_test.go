package registry_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Snapshots race registrations, calls, removals and the collector: no
// panic, no race, every kept pipeline in each snapshot with consistent
// counts, and the dropped ones gone in the end.
func TestR124SnapshotRacesGC(t *testing.T) {
	r := registry.New(registry.Interval(time.Millisecond, 50))
	var kept sync.Map
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad atomic.Value
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("p%d-%d", g, i)
				b := breaker.New("b" + name)
				p, err := r.AddPipeline(pipeline.New(pipeline.WithName(name), pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))),
					pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Microsecond), hedge.MaxShare(1)))))
				if err != nil {
					bad.Store(err)
					return
				}
				for j := range 5 {
					pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						if j%2 == 0 {
							time.Sleep(300 * time.Microsecond)
						}
						return 1, nil
					})
				}
				if i%3 == 0 {
					kept.Store(name, p)
				}
				if i%7 == 0 {
					r.RemovePipeline(name)
					kept.Delete(name)
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
	})
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		s := r.Snapshot()
		for _, ps := range s.Pipelines {
			if ps.Successes+ps.Failures > ps.Calls || ps.Calls > 5 {
				t.Errorf("%s: %+v", ps.Name, ps)
			}
			if ps.Breaker != "b"+ps.Name {
				t.Errorf("%s: breaker %q", ps.Name, ps.Breaker)
			}
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if e := bad.Load(); e != nil {
		t.Fatal(e)
	}
	for range 5 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	s := r.Snapshot()
	names := map[string]bool{}
	for _, ps := range s.Pipelines {
		names[ps.Name] = true
		if _, ok := kept.Load(ps.Name); !ok {
			t.Errorf("%s: dropped but still registered", ps.Name)
		}
		if ps.Calls != 5 || ps.Successes != 5 {
			t.Errorf("%s: %+v", ps.Name, ps)
		}
	}
	n := 0
	kept.Range(func(k, _ any) bool {
		n++
		if !names[k.(string)] {
			t.Errorf("%s kept but not in snapshot", k)
		}
		return true
	})
	_, pn := r.Names()
	if len(pn) != n {
		t.Errorf("Names: %d pipelines, kept %d", len(pn), n)
	}
	bn, _ := r.Names()
	t.Logf("kept %d pipelines, %d breakers registered", n, len(bn))
	runtime.KeepAlive(&kept)
}
