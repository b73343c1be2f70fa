package httpclient_test

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// addsHeader is a base that adds a header to the request, as some
// RoundTrippers do, answering the first attempt late.
type addsHeader struct {
	mu   sync.Mutex
	seen [][]string
}

func (b *addsHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r.Header.Add("X-Trace", "hop")
	b.mu.Lock()
	b.seen = append(b.seen, r.Header["X-Trace"])
	first := len(b.seen) == 1
	b.mu.Unlock()
	if first {
		time.Sleep(20 * time.Millisecond)
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestAttemptsDoNotShareWhatTheyAdd: attempts sent at once (a hedge and
// its twin) each get a header of their own: a base that adds to a header
// of the caller's writes into neither the caller's request nor the other
// attempt's, even where the caller's values have room to grow (go test
// -race sees the other case).
func TestAttemptsDoNotShareWhatTheyAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &addsHeader{}
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://dep.test/", nil)
		require.NoError(t, err)
		values := make([]string, 1, 8) // room to grow
		values[0] = "caller"
		req.Header["X-Trace"] = values
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		synctest.Wait()
		assert.Equal(t, []string{"caller"}, req.Header["X-Trace"], "the caller's request is unchanged")
		require.Len(t, base.seen, 2, "a hedge was sent")
		for _, s := range base.seen {
			assert.Equal(t, []string{"caller", "hop"}, s)
		}
		assert.Equal(t, []string{"caller", "", "", "", "", "", "", ""}, values[:8], "nothing written past the caller's values")
	})
}

// recordsHeader is a base that keeps the header of each request it gets.
type recordsHeader struct {
	mu   sync.Mutex
	seen []http.Header
}

func (b *recordsHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.seen = append(b.seen, r.Header.Clone())
	b.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestAStaleBudgetHeaderIsNotForwarded: a caller's deadline.Header (one
// it was sent, say) is replaced by the time left of the attempt's context,
// or removed when it has no deadline; the caller's request keeps it.
func TestAStaleBudgetHeaderIsNotForwarded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget time.Duration
		want   []string
	}{
		{"no deadline", 0, nil},
		{"a deadline", time.Hour, []string{"3600000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &recordsHeader{}
				p := pipeline.New(pipeline.WithRetry(retrypolicy.New()))
				if tc.budget > 0 {
					p = p.With(pipeline.WithTimeBudget(tc.budget))
				}
				hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))}
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://dep.test/", nil)
				require.NoError(t, err)
				req.Header.Set(deadline.Header, "5")
				resp, err := hc.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Len(t, base.seen, 1)
				assert.Equal(t, tc.want, base.seen[0][deadline.Header])
				assert.Equal(t, []string{"1/4"}, base.seen[0][retrysignal.AttemptHeader])
				assert.Equal(t, []string{"5"}, req.Header[deadline.Header], "the caller's request is unchanged")
			})
		})
	}
}
