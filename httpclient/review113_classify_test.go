package httpclient_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The caller's own proxy configuration fails before anything is dialed:
// its Proxy function returns an error, or names a proxy whose scheme
// net/http does not speak. Nothing reached the dependency (which is
// healthy): the error must neither be retried nor counted.
func TestReview113_ProxyConfigErrorsNotCounted(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	cases := map[string]func(*http.Request) (*url.URL, error){
		"proxy func error": func(*http.Request) (*url.URL, error) { return nil, errors.New("no proxy configured for this zone") },
		// What http.ProxyFromEnvironment returns for an HTTP_PROXY that
		// does not parse: "invalid proxy address".
		"proxy URL does not parse": func(*http.Request) (*url.URL, error) {
			_, err := url.Parse("http://[proxy.corp")
			return nil, fmt.Errorf("invalid proxy address %q: %w", "http://[proxy.corp", err)
		},
	}
	for name, proxy := range cases {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32 // one for each attempt, and one as the Transport asks whether its error was the proxy's
			base := &http.Transport{Proxy: func(r *http.Request) (*url.URL, error) { calls.Add(1); return proxy(r) }}
			b := breaker.New("r113", breaker.ConsecutiveFailures(1))
			rt := httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(b)), httpclient.Base(base))
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			var attempts atomic.Int32
			attempts.Store(calls.Load() / 2)
			if resilience.Classify(err) != resilience.ClassRejected {
				t.Errorf("class %v, want rejected: the caller's own error", resilience.Classify(err))
			}
			t.Logf("err=%v class=%v attempts=%d counts=%+v", err, resilience.Classify(err), attempts.Load(), b.Counts())
			if attempts.Load() != 1 || b.Counts().TotalFailures != 0 || b.State() != resilience.StateClosed {
				t.Fatalf("the caller's proxy configuration error was retried (%d attempts) or counted (%+v), breaker %v",
					attempts.Load(), b.Counts(), b.State())
			}
			// A healthy dependency's next call is refused by the breaker.
			req, _ = http.NewRequest(http.MethodGet, srv.URL, nil)
			resp, err = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(b))).RoundTrip(req)
			if err != nil {
				t.Fatalf("a call to the healthy dependency then failed: %v", err)
			}
			resp.Body.Close()
		})
	}
}

type r113RT func(*http.Request) (*http.Response, error)

func (f r113RT) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
