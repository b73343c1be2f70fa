package httpclient_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A GetBody that cannot rewind (it returns an error, as a body that is
// not replayable says so): the first attempt now sends Body and gets a
// 503; the retry's GetBody fails. Plain net/http hands the 503 back; the
// Transport should too (the body was why it was not retried), not fail
// the call with its own "rewind" error after draining the dependency's
// answer.
func TestReview114_GetBodyFailsOnRetryLosesAnswer(t *testing.T) {
	var hits atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(503)
		w.Write([]byte("overloaded, try later"))
	}))
	defer s.Close()
	mk := func() *http.Request {
		req, _ := http.NewRequest("PUT", s.URL, io.NopCloser(bytes.NewReader([]byte("payload"))))
		req.ContentLength = 7
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body not replayable") }
		return req
	}
	plain, err := http.DefaultClient.Do(mk())
	if err != nil {
		t.Fatalf("plain: %v", err)
	}
	plain.Body.Close()
	b := breaker.New("dep", breaker.ConsecutiveFailures(2))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(r114Fast()))))}
	hits.Store(0)
	resp, err := hc.Do(mk())
	if err != nil {
		t.Fatalf("plain net/http answered %d; the Transport failed the call after %d request(s): %v (class %v)", plain.StatusCode, hits.Load(), err, resilience.Classify(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
