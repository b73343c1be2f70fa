package grpcclient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestReview13HedgedCancel(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 2 * time.Second})
	b := breaker.New("h", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
	p := fastPipeline(pipeline.WithBreaker(b), pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))))
	client, _ := dial(t, srv, grpcclient.WithPipeline(p))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(150*time.Millisecond, cancel)
	var n atomic.Int32
	start := time.Now()
	_, err := client.Get(ctx, "x", grpc.OnFinish(func(error) { n.Add(1) }))
	el := time.Since(start)
	t.Logf("err %v after %v; server calls %d", err, el, srv.Count(grpctest.Get))
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.Less(t, el, 500*time.Millisecond)
	assert.EqualValues(t, 1, n.Load())
	assert.Equal(t, resilience.StateClosed, b.State())
}
