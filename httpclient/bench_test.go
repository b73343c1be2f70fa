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

// BenchmarkHTTP gets a 200 over loopback, in parallel: PlainClient, a
// plain http.Client, is the baseline of the others, which go through a
// Transport with a breaker and a retry (and a time budget: then each
// request has a deadline, which net/http watches at some cost of its own;
// PlainClientTimeout is a plain client paying that cost).
func BenchmarkHTTP(b *testing.B) {
	p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()))
	timed := p.With(pipeline.WithTimeBudget(10 * time.Second))
	for _, s := range []struct {
		name string
		hc   func(base http.RoundTripper) *http.Client
	}{
		{"PlainClient", func(base http.RoundTripper) *http.Client { return &http.Client{Transport: base} }},
		{"Transport", func(base http.RoundTripper) *http.Client {
			return &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))}
		}},
		{"PlainClientTimeout", func(base http.RoundTripper) *http.Client {
			return &http.Client{Transport: base, Timeout: 10 * time.Second}
		}},
		{"TransportTimeBudget", func(base http.RoundTripper) *http.Client {
			return &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(timed))}
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			base := &http.Transport{MaxIdleConnsPerHost: 64}
			defer base.CloseIdleConnections()
			benchGet(b, s.hc(base))
		})
	}
}

// noNetwork answers every request at once with an empty 200, so that a
// benchmark over it measures what the client adds, not the network.
type noNetwork struct{}

func (noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// BenchmarkTransportOverhead gets a 200 from a base that answers without
// a network: PlainClient (the baseline) calls the base through an
// http.Client, Transport through a Transport with a breaker and a retry:
//
//	cd benchmarks && go run ./ratios -pkg ../httpclient -bench TransportOverhead -baseline PlainClient -cpu 1
func BenchmarkTransportOverhead(b *testing.B) {
	p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()))
	for _, s := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"PlainClient", noNetwork{}},
		{"Transport", httpclient.NewTransport(httpclient.Base(noNetwork{}), httpclient.WithPipeline(p))},
	} {
		b.Run(s.name, func(b *testing.B) {
			hc := &http.Client{Transport: s.rt}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := hc.Get("http://dep.test/orders")
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
