package grpcidempotency_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A lease shorter than the handler: repeats while it runs are refused as in
// progress, and the handler runs once.
func TestReview13LeaseShorterThanHandler(t *testing.T) {
	guard := idempotency.NewGuard(idempotency.NewMemoryStore(0), idempotency.Lease(150*time.Millisecond), idempotency.StoreTimeout(20*time.Millisecond))
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.OK, Delay: 700 * time.Millisecond, Calls: 1})
	cc, err := grpctest.Dial(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := grpctest.NewClient(cc)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, err := client.Create(withKey(t.Context(), "lease"), "x")
		assert.NoError(t, err)
		assert.Equal(t, "created:x", got)
	}()
	for i := range 5 {
		time.Sleep(100 * time.Millisecond)
		_, err := client.Create(withKey(t.Context(), "lease"), "x")
		assert.Equal(t, codes.Aborted, status.Code(err), "repeat %d: %v", i, err)
	}
	wg.Wait()
	got, err := client.Create(withKey(t.Context(), "lease"), "x")
	assert.NoError(t, err)
	assert.Equal(t, "created:x", got)
	assert.Equal(t, 1, srv.Count(grpctest.Create))
}

// Concurrent keyed calls through a resilient client: the handler runs once
// and every caller gets its answer.
func TestReview13ConcurrentRepeatsThroughClient(t *testing.T) {
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.OK, Delay: 200 * time.Millisecond, Calls: 1})
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Second))))
	cc, err := grpctest.Dial(srv.Addr, grpcclient.New(grpcclient.WithPipeline(p)).DialOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := grpctest.NewClient(cc)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := client.Create(t.Context(), "x", grpcclient.IdempotencyKey("conc"))
			assert.NoError(t, err)
			assert.Equal(t, "created:x", got)
		}()
	}
	wg.Wait()
	runs := 0
	for _, c := range srv.Calls(grpctest.Create) {
		if c.Code == codes.OK {
			runs++
		}
	}
	t.Logf("server saw %d calls", srv.Count(grpctest.Create))
	assert.Equal(t, 1, runs)
}
