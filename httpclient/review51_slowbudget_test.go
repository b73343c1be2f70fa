package httpclient_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// After healthy 150 ms answers, callers with budgets over 100 ms but under
// the dependency's slowest recent answer must not open any hop's breaker.
func TestReview51_BudgetUnderSlowest(t *testing.T) {
	for _, budget := range []time.Duration{110 * time.Millisecond, 130 * time.Millisecond, 145 * time.Millisecond} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			hops, d := review51Chain(t, false, review51Opts{consecutive: 3})
			d.delay.Store(int64(150 * time.Millisecond))
			top := review51Top(review51Opts{})
			for range 3 {
				if err := top.GetJSON(context.Background(), hops[0].srv.URL, nil); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						ctx, cancel := context.WithTimeout(context.Background(), budget)
						_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
						cancel()
					}
				}()
			}
			wg.Wait()
			for i, h := range hops {
				if s := h.br.State(); s != resilience.StateClosed {
					t.Errorf("hop %c breaker %v (counts %+v)", 'A'+i, s, h.br.Counts())
				}
			}
			if err := top.GetJSON(context.Background(), hops[0].srv.URL, nil); err != nil {
				t.Errorf("healthy call failed after short-budget callers: %v", err)
			}
		})
	}
}
