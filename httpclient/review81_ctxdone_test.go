package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The caller's deadline passes while a stalled stream is being sent: the
// call returns the deadline's error, as net/http does, within a bound,
// and the body is closed. Does the error also claim the body was why it
// was not retried (ErrBodyNotRetried, EventNotRetried)?
func TestReview81DeadlineStalledStream(t *testing.T) {
	review51Leak(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	var notRetried atomic.Int64
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventNotRetried {
				notRetried.Add(1)
			}
		})))))
	const runs = 10
	claims := 0
	for i := 0; i < runs; i++ {
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte("hello")) }() // then stalls: never closed by the writer
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, pr)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		el := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || el > time.Second {
			t.Errorf("run %d: %v after %v", i, err, el)
		}
		if errors.Is(err, httpclient.ErrBodyNotRetried) {
			claims++
		}
		if _, werr := pw.Write([]byte("x")); werr == nil {
			t.Errorf("run %d: the caller's body is still open", i)
		}
	}
	if claims > 0 || notRetried.Load() > 0 {
		t.Errorf("a call whose caller's deadline passed matched ErrBodyNotRetried in %d of %d runs, EventNotRetried %d times: the deadline, not the body, ended it", claims, runs, notRetried.Load())
	}
}
