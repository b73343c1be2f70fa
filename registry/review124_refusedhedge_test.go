package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A hedge that the operation refuses as the caller's (class rejected, as
// httpclient refuses a hedge while the first attempt's body is read) does
// not make its call Hedged (it was not sent), but was reported as it was
// sent (resilience.EventHedged's doc): the registry counts it in Hedged,
// and the call once, as a success.
func TestR124OpRefusedHedgeNotCounted(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "first succeeds", true: "first fails"}[firstFails], func(t *testing.T) { r124RefusedHedge(t, firstFails) })
	}
}

func r124RefusedHedge(t *testing.T, firstFails bool) {
	{
		synctest.Test(t, func(t *testing.T) {
			r := registry.New()
			p := r124Pipe(t, r, "p")
			var n atomic.Int32
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					n.Add(1)
					return 0, resilience.Rejected(errors.New("body still read"))
				}
				if n.Load() == 0 {
					time.Sleep(15 * time.Millisecond)
					if firstFails {
						return 0, r124Err
					}
				}
				return 1, nil
			})
			if err != nil {
				t.Fatalf("firstFails=%v: %v", firstFails, err)
			}
			if pipeline.Hedged(err) {
				t.Errorf("Hedged")
			}
			time.Sleep(time.Second)
			synctest.Wait()
			s := r95State(t, r, p, "p")
			t.Logf("firstFails=%v refused hedges %d: %+v", firstFails, n.Load(), s)
			if n.Load() == 0 || s.Hedged != uint64(n.Load()) {
				t.Errorf("firstFails=%v: Hedged %d, hedges the operation refused %d", firstFails, s.Hedged, n.Load())
			}
			if s.Successes != 1 || s.Failures != 0 || s.Calls != 1 {
				t.Errorf("firstFails=%v: %+v", firstFails, s)
			}
		})
	}
}
