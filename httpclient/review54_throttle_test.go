package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Real HTTP: callers with deadlines too short for the (slow, healthy)
// server's answer never teach the throttle.
func TestReview54HTTPShortDeadlines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	for _, name := range []string{"budget", "budget+attempt", "plain"} {
		t.Run(name, func(t *testing.T) {
			th := throttle.New()
			opts := []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New())}
			switch name {
			case "budget":
				opts = append(opts, pipeline.WithTimeBudget(5*time.Second))
			case "budget+attempt":
				opts = append(opts, pipeline.WithTimeBudget(5*time.Second), pipeline.WithAttemptTimeout(2*time.Second))
			}
			c := httpclient.New(httpclient.WithPipeline(pipeline.New(opts...)))
			var wg sync.WaitGroup
			for range 8 {
				for range 25 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
						defer cancel()
						var out map[string]any
						c.GetJSON(ctx, srv.URL, &out)
					}()
				}
				time.Sleep(5 * time.Millisecond)
			}
			wg.Wait()
			if p := th.RejectProbability(); p != 0 {
				t.Errorf("after 200 calls with 5 ms deadlines: p = %v", p)
			}
			refused := 0
			for range 10 {
				var out map[string]any
				if err := c.GetJSON(context.Background(), srv.URL, &out); errors.Is(err, throttle.ErrThrottled) {
					refused++
				} else if err != nil {
					t.Log(err)
				}
			}
			if refused > 0 {
				t.Errorf("%d of 10 healthy calls throttled", refused)
			}
		})
	}
}
