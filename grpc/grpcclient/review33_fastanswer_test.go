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
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// The five 5 ms budgets, over a real gRPC server that answers in
// 30 ms, once the breaker has timed one fast answer (the server's first
// call answered at once): they open the default breaker, which then fails
// the next ordinary call (UNAVAILABLE) that the server answers in 30 ms.
// A cold breaker holds.
func TestReview33GRPCFastAnswerThenShortDeadlinesOpen(t *testing.T) {
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "after-one-fast-answer"
		}
		t.Run(name, func(t *testing.T) {
			srv, err := grpctest.Start()
			require.NoError(t, err)
			defer srv.Close()
			brk := breaker.New("orders")
			ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(brk))))
			conn, err := grpc.NewClient(srv.Addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			require.NoError(t, err)
			defer conn.Close()
			client := grpctest.NewClient(conn)
			if warm {
				_, err := client.Get(context.Background(), "warm")
				require.NoError(t, err)
			}
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 30 * time.Millisecond})
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				_, err := client.Get(ctx, "short")
				cancel()
				require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			}
			got, err := client.Get(context.Background(), "ordinary")
			assert.NoError(t, err, "breaker %v counts %+v", brk.State(), brk.Counts())
			t.Log(got)
		})
	}
}
