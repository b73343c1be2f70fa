package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The caller's own request body is slow to produce (a stream it writes as
// it goes); the healthy server reads it as it comes. The pipeline's budget
// runs out while the caller is still writing: that is no failure of the
// dependency's, and must not open the breaker for the calls that follow.
func TestReview169_SlowCallerBodyDoesNotCount(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		method string
		budget bool // the pipeline's budget; else the caller's deadline
	}{{"PUT", true}, {"POST", true}, {"PUT", false}, {"POST", false}} {
		method := tc.method
		name := method + " pipeline budget"
		if !tc.budget {
			name = method + " caller deadline"
		}
		t.Run(name, func(t *testing.T) {
			b := breaker.New("review169-slowbody")
			opts := []pipeline.Option{
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			}
			if tc.budget {
				opts = append(opts, pipeline.WithTimeBudget(300*time.Millisecond)) // the quick start's 2 s, shortened
			}
			p := pipeline.New(opts...)
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(review169Base()))}
			var last error
			for range 7 {
				pr, pw := io.Pipe()
				go func() {
					defer pw.Close()
					for range 10 { // 1 s of writing
						if _, err := pw.Write([]byte(strings.Repeat("s", 10))); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				if !tc.budget {
					ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
				}
				req, _ := http.NewRequestWithContext(ctx, method, srv.URL, pr)
				req.ContentLength = -1
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				pr.CloseWithError(errors.New("done"))
				cancel()
				if last == nil {
					t.Logf("%s: first error: %v (class %v)", method, err, resilience.Classify(err))
				}
				last = err
			}
			if st := b.State(); st != resilience.StateClosed {
				t.Errorf("%s: the caller's slow body (last error %v, class %v) opened the breaker: %v", method, last, resilience.Classify(last), st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("then a good call: %v", err)
			}
			resp.Body.Close()
		})
	}
}
