// Tests from review 39 of the queue order (OldestOnTime). They hold the
// timed Ticket, the edges and slots of the queue, and, in virtual time,
// that the default order gives exactly the former order's figures and
// OldestOnTime at least 90% of them.

package limit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// r39Call is one call of a workload: it starts at at, has budget (0: no
// deadline), and its attempt takes service once admitted.
type r39Call struct {
	at      time.Duration
	budget  time.Duration
	service time.Duration
	fails   bool // the dependency answers with an error
}

// r39Result is what a workload got its callers.
type r39Result struct {
	ok, limited, timedOut int
	failedIdx             []int
}

var errR39Dependency = errors.New("503")

// r39Sim runs calls through the Limiter l makes, in virtual time, and
// returns who completed within their budget.
func r39Sim(t *testing.T, l func() *Limiter, calls []r39Call) (res r39Result) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) { res = r39Run(l(), calls) })
	return res
}

// r39Run runs calls through lim in virtual time (it must be called inside
// a synctest bubble).
func r39Run(lim *Limiter, calls []r39Call) r39Result {
	var (
		mu  sync.Mutex
		res r39Result
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i, c := range calls {
		if d := c.at - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if c.budget > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.budget)
				defer cancel()
			}
			tk, err := lim.Acquire(ctx)
			if err != nil {
				mu.Lock()
				res.limited++
				res.failedIdx = append(res.failedIdx, i)
				mu.Unlock()
				return
			}
			t := time.NewTimer(c.service)
			select {
			case <-t.C:
				if c.fails {
					lim.Release(tk, errR39Dependency)
				} else {
					lim.Release(tk, nil)
				}
				mu.Lock()
				res.ok++
				mu.Unlock()
			case <-ctx.Done():
				t.Stop()
				lim.Release(tk, ctx.Err())
				mu.Lock()
				res.timedOut++
				res.failedIdx = append(res.failedIdx, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}
