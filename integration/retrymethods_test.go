package integration_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestRetryMethodsAddsToTheDefaultsOverHTTPAndGRPC: RetryMethods means the
// same in both clients: the methods it names are retried without an
// idempotency key, and so, still, are those retried by default (GET over
// HTTP; a method whose descriptor says NO_SIDE_EFFECTS over gRPC), while
// a method named by neither is tried once.
func TestRetryMethodsAddsToTheDefaultsOverHTTPAndGRPC(t *testing.T) {
	fast := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))) // 4 attempts

	t.Run("httpclient", func(t *testing.T) {
		calls := map[string]*atomic.Int64{http.MethodGet: {}, http.MethodPatch: {}, http.MethodPost: {}}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls[r.Method].Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(fast), httpclient.RetryMethods(http.MethodPatch))}
		for _, method := range []string{http.MethodGet, http.MethodPatch, http.MethodPost} {
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, nil)
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		assert.EqualValues(t, 4, calls[http.MethodGet].Load(), "GET, retried by default, still is")
		assert.EqualValues(t, 4, calls[http.MethodPatch].Load(), "PATCH, added, is retried")
		assert.EqualValues(t, 1, calls[http.MethodPost].Load(), "POST, named by neither, is tried once")
	})

	t.Run("grpcclient", func(t *testing.T) {
		srv, err := grpctest.Start()
		require.NoError(t, err)
		defer srv.Close()
		ic := grpcclient.New(grpcclient.WithPipeline(fast), grpcclient.RetryMethods(grpctest.Create))
		cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
		require.NoError(t, err)
		defer cc.Close()
		client := grpctest.NewClient(cc)
		srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
		srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable})
		_, err = client.Get(t.Context(), "a")
		assert.Equal(t, codes.Unavailable, status.Code(err))
		_, err = client.Create(t.Context(), "a")
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Equal(t, 4, srv.Count(grpctest.Get), "Get, NO_SIDE_EFFECTS, still retried")
		assert.Equal(t, 4, srv.Count(grpctest.Create), "Create, added, is retried")

		once := grpcclient.New(grpcclient.WithPipeline(fast))
		cc2, err := grpctest.Dial(srv.Addr, once.DialOptions()...)
		require.NoError(t, err)
		defer cc2.Close()
		_, err = grpctest.NewClient(cc2).Create(t.Context(), "a")
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Equal(t, 5, srv.Count(grpctest.Create), "without RetryMethods, Create is tried once")
	})
}
