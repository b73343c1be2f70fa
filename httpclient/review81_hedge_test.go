package httpclient_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Hedging on: the first attempt is slow, then cut after part of the body;
// hedges come due meanwhile. The call still succeeds with the exact body,
// and nothing counts against the server but the cut.
func TestReview81HedgeCut(t *testing.T) {
	review51Leak(t)
	rnd := rand.New(rand.NewPCG(8, uint64(time.Now().UnixNano())))
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			time.Sleep(20 * time.Millisecond)
			_, _ = io.CopyN(io.Discard, r.Body, 3000)
			c, _, _ := http.NewResponseController(w).Hijack()
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
			return
		}
		h := sha256.New()
		m, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%d %s", m, hex.EncodeToString(h.Sum(nil)))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	fails := 0
	const runs = 20
	for i := 0; i < runs; i++ {
		hits.Store(0)
		br := breaker.New("h81", breaker.ConsecutiveFailures(5))
		tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(br),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(2))))))
		size := 1 + rnd.IntN(150000)
		data, sum := review81Data(rnd, int64(size))
		body := review81Pipe(data, rnd, 0)
		req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			fails++
			t.Logf("run %d size %d: attempts %d: %v", i, size, hits.Load(), err)
			continue
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("%d %s", size, hex.EncodeToString(sum[:])); string(got) != want {
			t.Errorf("run %d: got %q want %q", i, got, want)
		}
		body.Close()
	}
	if fails > 0 {
		t.Errorf("%d of %d hedged, cut PUTs failed", fails, runs)
	}
}
