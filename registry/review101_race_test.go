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

func sum(xs []uint64) (s uint64) {
	for _, x := range xs {
		s += x
	}
	return
}

// Snapshots racing with registering, removing, re-registering under the
// same name and garbage collection: no data race, series consistent,
// counts of a stable pipeline never go backwards, and its series add up
// to its totals (no lost or doubled point).
func TestReview101SnapshotRacesRegistration(t *testing.T) {
	reg := registry.New(registry.Interval(time.Millisecond, registry.MaxPoints))
	sb := breaker.New("stable-b")
	stable, err := reg.AddPipeline(pipeline.New(pipeline.WithName("stable"), pipeline.WithBreaker(sb),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond)))))
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(stable) // the registry forgets a pipeline nothing references
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var okCalls, badCalls atomic.Uint64
	for g := range 2 {
		wg.Go(func() {
			i := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				i++
				_, err := pipeline.Do(ctx, stable, func(context.Context) (int, error) {
					if (i+g)%7 == 0 {
						return 0, errors.New("boom")
					}
					return 1, nil
				})
				if err == nil {
					okCalls.Add(1)
				} else {
					badCalls.Add(1)
				}
			}
		})
	}
	// churn: add, remove, re-add under the same names, let some be collected
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("churn-%d", i%5)
			b := breaker.New(name + "-b")
			p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(name), pipeline.WithBreaker(b)))
			if err == nil {
				_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
				if i%2 == 0 {
					reg.RemovePipeline(name)
					reg.RemoveBreaker(name + "-b")
				}
			}
			if i%50 == 0 {
				runtime.GC()
			}
		}
	})
	var last registry.PipelineState
	var snaps int
	check := func(s registry.Snapshot) {
		seen := map[string]bool{}
		for _, ps := range s.Pipelines {
			if seen[ps.Name] {
				t.Errorf("pipeline %q twice in a snapshot", ps.Name)
			}
			seen[ps.Name] = true
			if n := len(ps.Series.Successes); n != len(ps.Series.Failures) || n != len(ps.Series.Rejections) || n > s.Points {
				t.Errorf("pipeline %q series lengths %d %d %d", ps.Name, n, len(ps.Series.Failures), len(ps.Series.Rejections))
			}
			if ps.Name == "stable" {
				if ps.Calls < last.Calls || ps.Successes < last.Successes || ps.Attempts < last.Attempts {
					t.Errorf("stable went backwards: calls %d->%d succ %d->%d att %d->%d", last.Calls, ps.Calls, last.Successes, ps.Successes, last.Attempts, ps.Attempts)
				}
				last = ps
			}
		}
		for _, bs := range s.Breakers {
			if n := len(bs.Series.Successes); n != len(bs.Series.Failures) || n != len(bs.Series.Rejections) || n > s.Points {
				t.Errorf("breaker %q series lengths", bs.Name)
			}
		}
	}
	var smu sync.Mutex
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				smu.Lock() // snapshots in the order they are checked
				s := reg.Snapshot()
				check(s)
				snaps++
				smu.Unlock()
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	time.Sleep(800 * time.Millisecond)
	close(stop)
	wg.Wait()
	time.Sleep(3 * time.Millisecond)
	s := reg.Snapshot()
	check(s)
	for _, ps := range s.Pipelines {
		if ps.Name != "stable" {
			continue
		}
		if ps.Successes != okCalls.Load() {
			t.Errorf("Successes %d, calls that succeeded %d", ps.Successes, okCalls.Load())
		}
		if ps.Failures != badCalls.Load() {
			t.Errorf("Failures %d, calls that failed %d", ps.Failures, badCalls.Load())
		}
		if got := sum(ps.Series.Successes); got != ps.Successes {
			t.Errorf("series successes add to %d, total %d", got, ps.Successes)
		}
		if got := sum(ps.Series.Failures); got < ps.Failures {
			t.Errorf("series failures add to %d, total %d", got, ps.Failures)
		}
	}
	for _, bs := range s.Breakers {
		if bs.Name == "stable-b" {
			if got := sum(bs.Series.Successes); got != okCalls.Load() {
				t.Errorf("breaker series successes add to %d, calls %d", got, okCalls.Load())
			}
		}
	}
	t.Logf("snapshots %d, ok %d bad %d", snaps, okCalls.Load(), badCalls.Load())
}
