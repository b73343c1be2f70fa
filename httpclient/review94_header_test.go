package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A caller's request that carries an attempt header under a name of
// another case (a header map filled as it came, e.g. forwarded) gets the
// Transport's own beside it: the server sees two values, and the hop's
// Middleware ignores both, as it does the budget header's (which the
// Transport drops whatever its case).
func TestReview94_NonCanonicalAttemptHeader(t *testing.T) {
	review51Leak(t)
	var mu sync.Mutex
	var got []string
	var seen []bool
	s := httptest.NewServer(retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := retrysignal.FromContext(r.Context())
		mu.Lock()
		got = append(got, r.Header.Values(retrysignal.AttemptHeader)...)
		seen = append(seen, ok)
		mu.Unlock()
		w.WriteHeader(503)
	})))
	t.Cleanup(s.Close)
	tr := httpclient.NewTransport(httpclient.WithPipeline(review94Pipe(2)))
	req, _ := http.NewRequestWithContext(context.Background(), "GET", s.URL, nil)
	req.Header["request-attempt"] = []string{"7/9"}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	tr.CloseIdleConnections()
	t.Logf("values seen %q, FromContext ok %v", got, seen)
	for _, ok := range seen {
		if !ok {
			t.Errorf("the hop could not read the attempt: two Request-Attempt values were sent: %q", got)
			break
		}
	}
}

// Hostile answers: huge, repeated or odd No-Retry values from a trusted
// dependency must not panic, and only exactly "1" (first value) stops
// retries.
func TestReview94_HostileNoRetryValues(t *testing.T) {
	review51Leak(t)
	cases := map[string][]string{
		"huge":     {string(make([]byte, 64<<10))},
		"one-then": {"1", "0"},
		"zero":     {"0"},
		"spaced":   {" 1 "},
		"true":     {"true"},
		"many":     append([]string{"0"}, make([]string, 2000)...),
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			n := 0
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n++
				for _, v := range vals {
					w.Header().Add(retrysignal.NoRetryHeader, v)
				}
				w.WriteHeader(503)
			}))
			defer s.Close()
			c := httpclient.New(httpclient.WithPipeline(review94Pipe(3)))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := review94Get(ctx, c, s.URL)
			t.Logf("%s: %d requests, err %v", name, n, err != nil)
		})
	}
}
