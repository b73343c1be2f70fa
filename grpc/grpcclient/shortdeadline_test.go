package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A dependency that answers in 30 ms, and callers whose deadlines (the
// grpc-timeout an upstream sends) are 5 ms: their calls run out of time,
// and the default breaker does not count them; the calls with time enough
// go through. Once the dependency hangs, those calls open it.
func TestShortUpstreamDeadlinesDoNotOpenTheBreaker(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 30 * time.Millisecond})
	b := breaker.New("dep") // 5 failures in a row
	c, _ := dial(t, srv, grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))))
	call := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := c.Get(ctx, "x")
		return err
	}
	require.NoError(t, call(time.Second)) // an answer, timed
	for range 20 {
		assert.Equal(t, codes.DeadlineExceeded, status.Code(call(5*time.Millisecond)))
	}
	assert.Equal(t, resilience.StateClosed, b.State(), "counts %+v", b.Counts())
	assert.Zero(t, b.Counts().TotalFailures)
	require.NoError(t, call(time.Second), "a call with time enough goes through")

	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: time.Hour})
	for range 5 {
		assert.Equal(t, codes.DeadlineExceeded, status.Code(call(200*time.Millisecond)))
	}
	assert.Equal(t, resilience.StateOpen, b.State(), "a dependency that hangs opens it")
}
