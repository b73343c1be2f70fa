package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// The chain over real HTTP: caller A -> service B (deadline
// Middleware) -> dependency C, through an httpclient with the default
// breaker. C is healthy: /fast answers at once, /slow in 30 ms. B serves
// one request to /fast (C's fast endpoint answers), then A sends five
// requests to /slow with a 5 ms budget (the five), then an
// ordinary request to /fast: a plain client would get C's answer; B's
// breaker, opened by A's budgets, fails it. Without the first /fast
// (cold breaker) it holds.
func TestReview33HopsFastAnswerThenShortBudgetsOpenB(t *testing.T) {
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(30 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer c.Close()

	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "after-one-fast-answer"
		}
		t.Run(name, func(t *testing.T) {
			brk := breaker.New("C")
			client := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(brk))))
			b := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := client.GetJSON(r.Context(), c.URL+r.URL.Path, nil); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				_, _ = io.WriteString(w, "{}")
			})))
			defer b.Close()

			get := func(path string, budget time.Duration) (int, string) {
				ctx := context.Background()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+path, nil)
				require.NoError(t, err)
				if budget > 0 {
					req.Header.Set(deadline.Header, "5") // what Inject sends for a 5 ms budget
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			if warm {
				code, _ := get("/fast", 0)
				require.Equal(t, http.StatusOK, code)
			}
			for range 5 {
				code, _ := get("/slow", 5*time.Millisecond)
				require.Equal(t, http.StatusServiceUnavailable, code) // B ran out of A's budget
			}
			code, body := get("/fast", 0)
			assert.Equal(t, http.StatusOK, code, "B failed an ordinary request to a healthy C: %s (breaker %v, counts %+v)", body, brk.State(), brk.Counts())
		})
	}
}
