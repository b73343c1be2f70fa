package registry_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// Under concurrency the call that is timed is the first to end among those
// that started while the counts asked for one: the fastest. With 3 calls
// in 4 taking 4 ms and 1 in 4 taking nothing, p50 must be about 4 ms.
func TestLatencySampleBiasedToFastCalls(t *testing.T) {
	r := registry.New()
	p, err := r.AddPipeline(pipeline.New(pipeline.WithName("edges27-lat")))
	if err != nil {
		t.Fatal(err)
	}
	const slow = 4 * time.Millisecond
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n.Add(1); i <= 2400; i = n.Add(1) { // i its own: n.Load() here read others' (CI, once)
				pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					if i%4 != 0 {
						time.Sleep(slow)
					}
					return 0, nil
				})
			}
		}()
	}
	wg.Wait()
	ps := state27(t, r, p, "edges27-lat")
	if ps.P50 < slow {
		t.Errorf("3 calls in 4 take >= %v: p50 = %v, p99 = %v (calls %d)", slow, ps.P50, ps.P99, ps.Calls)
	}
}
