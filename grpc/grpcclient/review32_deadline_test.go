package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review32: the scenario over gRPC (grpc-timeout): short
// deadlines to a healthy dependency answering in 30 ms, after the
// breaker has timed a few answers. Expected to hold: the server's
// deadline comes after the client's.
func TestReview32GRPCShortDeadlinesDoNotOpen(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			srv, err := grpctest.Start()
			require.NoError(t, err)
			defer srv.Close()
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 30 * time.Millisecond})
			b := breaker.New("dep")
			ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New()),
			)))
			conn, err := grpc.NewClient(srv.Addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			require.NoError(t, err)
			defer conn.Close()
			c := grpctest.NewClient(conn)
			for range 3 {
				_, err := c.Get(context.Background(), "x")
				require.NoError(t, err)
			}
			for range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				_, _ = c.Get(ctx, "x")
				cancel()
			}
			t.Logf("%v: %+v", b.State(), b.Counts())
			_, err = c.Get(context.Background(), "x")
			assert.NoError(t, err)
			assert.Zero(t, b.Counts().TotalFailures)
		})
	}
}
