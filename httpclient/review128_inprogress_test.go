package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A healthy dependency behind package idempotency answers a key's duplicate
// with 409 "request in progress", Retry-After: 1 (its normal answer while
// the first request runs). A caller that hangs up during that wait must
// not count a breaker failure: the dependency did nothing wrong.
func TestReview128InProgressHangUp(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"title":"request in progress"}`))
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	b := breaker.New("r128-inprogress")
	c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel) // the caller's client hangs up during the wait
	err := c.PostJSON(ctx, srv.URL, map[string]int{"a": 1}, nil, httpclient.IdempotencyKey("k1"))
	t.Logf("err %v counts %+v", err, b.Counts())
	if err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("want the call canceled, err %v", err)
	}
	if c := b.Counts(); c.TotalFailures != 0 {
		t.Fatalf("an in-progress 409 of a healthy dependency counted as a breaker failure on a hang-up: %+v", c)
	}
}
