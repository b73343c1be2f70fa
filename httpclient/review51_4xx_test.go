package httpclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The caller's own faults (4xx from the bottom), passed up with the
// signal, must not open any hop's breaker nor be retried anywhere.
func TestReview51_CallerFaultsThroughChain(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, status := range []int{400, 401, 404, 409, 422} {
			t.Run(fmt.Sprintf("h2=%v/%d", h2, status), func(t *testing.T) {
				hops, d := review51Chain(t, h2, review51Opts{consecutive: 2})
				d.status.Store(int64(status))
				o := review51Opts{}
				if h2 {
					o.base = d.srv.Client().Transport
				}
				top := review51Top(o)
				for range 10 {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
					cancel()
				}
				if d.seen.Load() != 10 {
					t.Errorf("D saw %d for 10 calls", d.seen.Load())
				}
				for i, h := range hops {
					if s := h.br.State(); s != resilience.StateClosed {
						t.Errorf("hop %c breaker %v after %d answers", 'A'+i, s, status)
					}
				}
				d.status.Store(200)
				if err := top.GetJSON(context.Background(), hops[0].srv.URL, nil); err != nil {
					t.Errorf("healthy call failed: %v", err)
				}
			})
		}
	}
}
