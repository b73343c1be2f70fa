package httpclient_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// BreakerPerHost past MaxBreakers: the hosts past the bound share one
// breaker, so one dead host among them fails the calls to the healthy
// others, which a plain client completes. The slots are taken first come,
// for good: hosts a caller named once (a typo, a webhook URL from a
// tenant) keep them.
func TestReview113_OverflowHostsShareABreaker(t *testing.T) {
	healthy := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		t.Cleanup(s.Close)
		return s
	}
	a, b, d := healthy(), healthy(), healthy()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close() // refused
	shared := breaker.New("overflow", breaker.ConsecutiveFailures(1))
	rt := httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(shared)), httpclient.MaxBreakers(2),
		httpclient.BreakerPerHost(func(auth string) *breaker.Breaker { return breaker.New(auth, breaker.ConsecutiveFailures(1)) }))
	get := func(u string) error {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, u := range []string{a.URL, b.URL} { // the bound's hosts, once each
		if err := get(u); err != nil {
			t.Fatal(err)
		}
	}
	if err := get(dead); err == nil {
		t.Fatal("dead host answered")
	}
	if err := get(d.URL); err != nil {
		t.Fatalf("a healthy host failed because another host past MaxBreakers is dead: %v", err)
	}
}
