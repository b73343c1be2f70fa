package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A hop that answers 504 when its (propagated) deadline passes must not
// answer before the caller's own deadline, and the caller's breaker must
// not count those calls (short budgets under 100 ms).
func TestReview84_HopNeverEndsBeforeCaller(t *testing.T) {
	hop := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		w.WriteHeader(http.StatusGatewayTimeout)
	})))
	defer hop.Close()
	b := breaker.New("hop84", breaker.ConsecutiveFailures(1000000))
	c := review84Client(http.DefaultTransport, pipeline.New(pipeline.WithBreaker(b)))
	var early, got504, total, ctxDone atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				budget := time.Duration(5+(g*7+i*3)%60) * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				dl, _ := ctx.Deadline()
				req, _ := http.NewRequestWithContext(ctx, "GET", hop.URL, nil)
				resp, err := c.Do(req)
				total.Add(1)
				if err == nil {
					if resp.StatusCode == 504 {
						got504.Add(1)
						if ctx.Err() != nil {
							ctxDone.Add(1)
						}
						if time.Now().Before(dl) {
							early.Add(1)
						}
					}
					resp.Body.Close()
				}
				cancel()
			}
		}(g)
	}
	wg.Wait()
	t.Logf("total %d, 504 handed back %d (before caller deadline: %d); breaker counts %+v", total.Load(), got504.Load(), early.Load(), b.Counts())
	t.Logf("504 handed back with the caller's ctx already done (checked after Do returned): %d", ctxDone.Load())
	if early.Load() > 0 {
		t.Errorf("hop answered 504 before the caller's deadline %d times", early.Load())
	}
	// net/http, with many requests ending at once, at times returns a
	// bare context.DeadlineExceeded for a request whose context has time
	// left (1 to 2 of 400 on a loaded 2-core machine), which counts: a
	// tls.Dialer's timeout, or a base's own per-try timeout, returns the
	// same error for a dependency that hangs, so it is not told apart.
	if n := b.Counts().TotalFailures; n > 4 {
		t.Errorf("caller's breaker counted %d short-budget calls as failures", n)
	}
}
