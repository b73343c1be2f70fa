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

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// Concurrent AddPipeline of the same name: exactly one wins while the
// winner is held; Remove/Add churn never leaves two or a stale entry.
func TestReview95ConcurrentSameName(t *testing.T) {
	r := registry.New()
	for round := range 200 {
		name := fmt.Sprint("same", round)
		var wins atomic.Int32
		var winners sync.Map
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				p, err := r.AddPipeline(pipeline.New(pipeline.WithName(name)))
				switch {
				case err == nil:
					wins.Add(1)
					winners.Store(i, p)
				case !errors.Is(err, registry.ErrDuplicate):
					t.Errorf("unexpected %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d winners", round, wins.Load())
		}
		runtime.KeepAlive(&winners)
	}
	// churn
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 500 {
				if i%2 == 0 {
					p, _ := r.AddPipeline(pipeline.New(pipeline.WithName("churn")))
					runtime.KeepAlive(p)
				} else {
					r.RemovePipeline("churn")
				}
				r.Snapshot()
			}
		})
	}
	wg.Wait()
}

// Names lists a pipeline collected but not yet cleaned up? (Breakers are
// checked for liveness in Names; pipelines are not.)
func TestReview95NamesRightAfterCollection(t *testing.T) {
	r := registry.New()
	func() {
		p, _ := r.AddPipeline(pipeline.New(pipeline.WithName("gone95")))
		runtime.KeepAlive(p)
	}()
	runtime.GC()
	_, ps := r.Names()
	s := r.Snapshot()
	t.Logf("right after GC: Names %v, snapshot %d pipelines", ps, len(s.Pipelines))
	// A new pipeline takes the name at once.
	p, err := r.AddPipeline(pipeline.New(pipeline.WithName("gone95")))
	if err != nil {
		t.Errorf("name of a collected pipeline not free: %v", err)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if _, ps := r.Names(); len(ps) != 1 {
		t.Errorf("after the old one's cleanup ran: Names %v", ps)
	}
	runtime.KeepAlive(p)
}

// Adding the registered (observed) pipeline again under another registry,
// and registering the same pipeline twice in one registry.
func TestReview95ObservedTwice(t *testing.T) {
	r1, r2 := registry.New(), registry.New()
	base := pipeline.New(pipeline.WithName("twice95"))
	o1, err := r1.AddPipeline(base)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := r2.AddPipeline(o1)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		pipeline.Do(context.Background(), o2, func(context.Context) (int, error) { return 1, nil })
	}
	a, b := r95State(t, r1, o1, "twice95"), r95State(t, r2, o2, "twice95")
	if a.Calls != 10 || b.Calls != 10 || a.Successes != 10 || b.Successes != 10 {
		t.Errorf("nested registration: r1 %d/%d, r2 %d/%d", a.Calls, a.Successes, b.Calls, b.Successes)
	}
	// Retrieve by name and re-add the same base.
	if _, err := r1.AddPipeline(base); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("same pipeline twice: %v", err)
	}
	runtime.KeepAlive(o1)
	runtime.KeepAlive(o2)
}
