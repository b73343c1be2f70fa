package grpcclient_test

// Review 23: grpcclient.Error.HTTPStatus of a CANCELED (503 since
// 59af432) and retrysignal.Retried of a call that made one attempt,
// which nobody retried.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A proxy between a service and its gRPC dependency resets one stream
// (CANCELED, which the commit names: "the caller went away, or a proxy
// reset the stream"). The service's client does not retry a CANCELED: one
// attempt, that nobody retried. Retried's doc: "One attempt that failed
// and that nobody retried ... is not" retried, and the Handler's: answered
// "without the signal, so that the caller may retry what nobody below
// did". The service answers 503 with No-Retry: its caller, a resilient
// client that would retry a 503, gives up; the user's call fails on one
// reset that no layer retried.
func TestReview23AProxyResetIsSignalledAsRetried(t *testing.T) {
	srv, err := grpctest.Start()
	require.NoError(t, err)
	defer srv.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Canceled, Message: "stream reset by proxy", Calls: 1})

	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(
		retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	defer cc.Close()
	dep := grpctest.NewClient(cc)

	var retried []bool
	svc := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		out, err := dep.Get(r.Context(), "x")
		if err != nil {
			retried = append(retried, retrysignal.Retried(err))
			return err
		}
		fmt.Fprint(w, out)
		return nil
	}))
	defer svc.Close()

	upstream := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(
		retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, svc.URL, nil)
	resp, err := upstream.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("upstream: %d %q No-Retry=%q; the dependency got %d calls; Retried said %v", resp.StatusCode, body,
		resp.Header.Get(retrysignal.NoRetryHeader), srv.Count(grpctest.Get), retried)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "one reset, retried by nobody below: the caller's retry completes the call")
}
