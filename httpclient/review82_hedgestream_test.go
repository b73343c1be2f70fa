package httpclient

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func review82Server(t *testing.T, hold time.Duration, status int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		time.Sleep(hold)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func review82Transport() *Transport {
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
	)
	return NewTransport(WithPipeline(p))
}

// A streamed body still being sent when the hedge is due: the hedge is not
// sent (errBodyBusy), the server sees one request. The failed answer must
// not say "don't retry".
func TestReview82_StreamedHedgeNotSentNotMarked(t *testing.T) {
	const runs = 10
	bad := 0
	for i := 0; i < runs; i++ {
		srv, n := review82Server(t, 30*time.Millisecond, http.StatusServiceUnavailable)
		tr := review82Transport()
		pr, pw := io.Pipe()
		go func() {
			for j := 0; j < 6; j++ {
				pw.Write([]byte("0123456789"))
				time.Sleep(10 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPut, srv.URL, pr)
		resp, err := tr.do(req)
		if resp == nil {
			t.Fatalf("run %d: no response: %v", i, err)
		}
		resp.Body.Close()
		got := n.Load()
		h := resp.Header.Get(retrysignal.NoRetryHeader)
		if got == 1 && (h != "" || pipeline.Hedged(err) || retrysignal.Retried(err)) {
			bad++
			t.Logf("run %d: server saw %d request(s), No-Retry=%q Hedged=%v Retried=%v err=%v", i, got, h, pipeline.Hedged(err), retrysignal.Retried(err), err)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d runs: one request sent, yet marked hedged / don't retry", bad, runs)
	}
}
