package registry_test

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// A name re-registered after its first pipeline and breaker were collected,
// before or after their cleanups ran, and Names called in between: the new
// ones stay listed, whatever order the cleanups and Names take.
func TestReview126_ReRegisteredNameSurvivesNamesAndCleanup(t *testing.T) {
	for i := range 50 {
		r := registry.New()
		func() {
			p := pipeline.New(pipeline.WithName("x"), pipeline.WithBreaker(breaker.New("b")))
			if _, err := r.AddPipeline(p); err != nil {
				t.Fatal(err)
			}
		}()
		for range 10 {
			runtime.GC()
			if _, ok := r.Breaker("b"); !ok {
				break
			}
		}
		if i%2 == 0 {
			r.Names() // deletes the collected entries now
		}
		p2 := pipeline.New(pipeline.WithName("x"), pipeline.WithBreaker(breaker.New("b")))
		obs, err := r.AddPipeline(p2)
		if err != nil {
			t.Fatalf("run %d: re-register: %v", i, err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					r.Names()
					runtime.Gosched()
				}
			})
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
		wg.Wait()
		bs, ps := r.Names()
		if !slices.Contains(ps, "x") || !slices.Contains(bs, "b") {
			t.Fatalf("run %d: names %v %v: the re-registered pipeline or breaker lost", i, bs, ps)
		}
		if _, ok := r.Breaker("b"); !ok {
			t.Fatalf("run %d: breaker b lost", i)
		}
		runtime.KeepAlive(obs)
	}
}
