package httpclient_test

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Hedges, retries of 503s with bodies, stream bodies of unknown length,
// bodies closed unread: once every body is closed and the idle
// connections are, nothing of the Transport's is left running, and no
// more connections are open than the calls made at once.
func TestReview113_NoLeakUnderHedgesAndRetries(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch rand.IntN(4) {
		case 0:
			w.WriteHeader(503)
			w.Write([]byte(strings.Repeat("e", 1000)))
		case 1:
			time.Sleep(15 * time.Millisecond)
			w.Write([]byte(strings.Repeat("s", 5000)))
		default:
			w.Write([]byte(strings.Repeat("o", 70000)))
		}
	}))
	var mu sync.Mutex
	conns := map[string]bool{}
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if s == http.StateNew {
			conns[c.RemoteAddr().String()] = true
		}
	}
	srv.Start()
	defer srv.Close()
	base := &http.Transport{MaxIdleConnsPerHost: 100}
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))))
	rt := httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))
	hc := &http.Client{Transport: rt}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req *http.Request
			switch i % 3 {
			case 0:
				req, _ = http.NewRequest(http.MethodGet, srv.URL, nil)
			case 1:
				req, _ = http.NewRequest(http.MethodPut, srv.URL, io.MultiReader(strings.NewReader("stream")))
			case 2:
				req, _ = http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("known"))
			}
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			if i%2 == 0 {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // hedges' losers closing
	hc.CloseIdleConnections()
	mu.Lock()
	t.Logf("connections opened: %d", len(conns))
	mu.Unlock()
	goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
