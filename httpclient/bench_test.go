package httpclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// benchGet makes GETs of a 200 through hc, in parallel.
func benchGet(b *testing.B, hc *http.Client) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Get(srv.URL)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// The baseline: a plain http.Client on its own transport. Compare
// BenchmarkTransport with it as a ratio.
func BenchmarkPlainClient(b *testing.B) {
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	defer base.CloseIdleConnections()
	benchGet(b, &http.Client{Transport: base})
}

// BenchmarkTransport is the same through a Transport with a breaker and a
// retry.
func BenchmarkTransport(b *testing.B) {
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	defer base.CloseIdleConnections()
	p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()))
	benchGet(b, &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))})
}

// BenchmarkTransportTimeBudget adds a time budget: each request then has
// a deadline, which net/http watches at some cost of its own.
func BenchmarkTransportTimeBudget(b *testing.B) {
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	defer base.CloseIdleConnections()
	p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithTimeBudget(10*time.Second))
	benchGet(b, &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))})
}

// BenchmarkPlainClientTimeout is the baseline of BenchmarkTransportTimeBudget:
// a plain client whose requests have a deadline.
func BenchmarkPlainClientTimeout(b *testing.B) {
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	defer base.CloseIdleConnections()
	benchGet(b, &http.Client{Transport: base, Timeout: 10 * time.Second})
}
