package retrysignal_test

import (
	"context"
	"sync/atomic"
	"time"

	"errors"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// The headers WriteError drops as contradicting its problem document are
// dropped in any spelling, as No-Retry is (a handler that copied them into
// the map as they came, from metadata or a lower-cased source, sends them
// as they are): a Content-Length of the answer the handler meant to give
// must not cut the problem document, nor a Retry-After survive.
func TestReview158_ContradictingHeadersInAnySpelling(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		hits.Add(1)
		h := w.Header()
		if r.URL.Path != "/nolength" {
			h["content-length"] = []string{"7"}
		}
		h["retry-after"] = []string{"3600"}
		h["etag"] = []string{`"v1"`}
		return resilience.Terminal(errors.New("dependency failed after retrying"))
	}))
	defer srv.Close()
	// A resilient caller: the don't-retry answer must stop it.
	c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(
		retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	cerr := c.GetJSON(context.Background(), srv.URL, nil)
	if n := hits.Load(); n != 1 {
		t.Errorf("the don't-retry answer was retried: %d requests (err %v)", n, cerr)
	}
	plain := &http.Client{Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	if resp, err := plain.Get(srv.URL); err != nil {
		t.Errorf("the client could not read the answer: %v", err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := plain.Get(srv.URL + "/nolength")
	if err != nil {
		t.Fatalf("the client could not read the answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(body), "do not retry") {
		t.Errorf("problem document cut or unreadable: %q, %v", body, err)
	}
	if v := resp.Header.Values("Retry-After"); len(v) > 0 {
		t.Errorf("Retry-After %q survived WriteError", v)
	}
	if v := resp.Header.Values("Etag"); len(v) > 0 {
		t.Errorf("ETag %q survived WriteError", v)
	}
}
