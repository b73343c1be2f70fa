package grpcclient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestReview13LimitRejectionStatus: a call that the pipeline's own
// concurrency limit refuses was never sent; its status says UNKNOWN.
func TestReview13LimitRejectionStatus(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 300 * time.Millisecond, Calls: 1})
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithLimit(limit.NewFixed(1)))))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = client.Get(context.Background(), "slow") }()
	time.Sleep(100 * time.Millisecond)
	_, err := client.Get(t.Context(), "x")
	wg.Wait()
	t.Logf("err %v, code %v, errors.Is(ErrLimited) %v, grpcsignal.Code %v", err, status.Code(err), errors.Is(err, limit.ErrLimited), grpcsignal.Code(err))
	assert.True(t, errors.Is(err, limit.ErrLimited))
	assert.NotEqual(t, codes.Unknown, status.Code(err), "a local load-shedding refusal")
}
