package httpclient_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A streamed PUT (a writer that writes 1 KiB a millisecond, 200 KiB in
// all, within MaxBufferedBody) to a server whose first answer is slower
// than the attempt timeout: the attempt times out while net/http waits in
// the body's Read for a moment; the retry could send what was kept and the
// rest (the base is done with its reader within 1 ms, well within
// DrainTimeout). A plain client completes the call (the server answers
// the first request after 400 ms).
func TestReview81AttemptTimeoutStream(t *testing.T) {
	review51Leak(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			select {
			case <-time.After(400 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	const size = 200 << 10
	body := func() io.ReadCloser {
		pr, pw := io.Pipe()
		go func() {
			b := make([]byte, 1024)
			for i := 0; i < size/1024; i++ {
				if _, err := pw.Write(b); err != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
			pw.Close()
		}()
		return pr
	}
	// plain
	req, _ := http.NewRequest(http.MethodPut, srv.URL, body())
	resp, err := base.RoundTrip(req)
	if err != nil {
		t.Fatalf("plain: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("plain: %s", got)
	fails := 0
	const runs = 5
	for i := 0; i < runs; i++ {
		hits.Store(0)
		tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))), pipeline.WithAttemptTimeout(100*time.Millisecond))))
		req, _ := http.NewRequest(http.MethodPut, srv.URL, body())
		resp, err := tr.RoundTrip(req)
		if err != nil {
			fails++
			t.Logf("run %d: attempts %d, not retried %v: %v", i, hits.Load(), errors.Is(err, httpclient.ErrBodyNotRetried), err)
			continue
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != fmt.Sprintf("%d <nil>", size) {
			t.Errorf("run %d: %s", i, got)
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d streamed PUTs failed after an attempt timeout where a plain client completed", fails, runs)
	}
}
