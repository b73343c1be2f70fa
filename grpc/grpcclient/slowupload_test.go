package grpcclient_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A caller that streams an upload slower than its own deadline allows
// (a message every 100 ms, 300 ms to do it in) to a healthy server, which
// answers once it has the whole request (grpc-go's interop service): the
// deadline is the caller's doing, not the server's, and five such calls
// would not open the breaker for the calls that follow, as httpclient's
// slow request body does not (review169).
func TestSlowClientStreamDoesNotCount(t *testing.T) {
	t.Skip("known limit (docs/retries.md, the classes table; grpcclient's package doc: a client stream that the call's deadline ended counts as a unary call's does): the rule tried for it took hung dependencies for slow callers (review171)")
	srv := startInterop(t)
	for _, budget := range []bool{true, false} {
		t.Run(map[bool]string{true: "time budget", false: "caller deadline"}[budget], func(t *testing.T) {
			b := breaker.New("slow-upload")
			opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))}
			if budget {
				opts = append(opts, pipeline.WithTimeBudget(300*time.Millisecond))
			}
			ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(opts...)))
			cc, err := grpc.NewClient(srv.addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			require.NoError(t, err)
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)
			for range 7 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				if !budget {
					ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
				}
				stream, err := client.StreamingInputCall(ctx)
				if err == nil {
					for range 10 {
						if stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 10)}}) != nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					_, err = stream.CloseAndRecv()
				}
				cancel()
				require.Error(t, err)
				require.Equal(t, resilience.ClassRejected, resilience.Classify(err), "%v", err)
			}
			require.Equal(t, resilience.StateClosed, b.State())
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = client.EmptyCall(ctx, &testpb.Empty{})
			require.NoError(t, err)
		})
	}
}

// The other side: a server that hangs. It takes a client stream and never
// answers, or reads none of it, so that flow control holds the caller's
// sends of 64 KiB messages, never closed. The call's deadline ends it: the
// dependency's failure, counted, and the breaker opens.
func TestHangingClientStreamServerCounts(t *testing.T) {
	for _, readNothing := range []bool{false, true} {
		t.Run(map[bool]string{false: "reads it all", true: "reads nothing"}[readNothing], func(t *testing.T) {
			srv := startHanging(t, readNothing)
			b := breaker.New("hanging-upload", breaker.ConsecutiveFailures(3))
			ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), pipeline.WithTimeBudget(300*time.Millisecond))))
			cc, err := grpc.NewClient(srv, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			require.NoError(t, err)
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)
			for range 3 {
				stream, err := client.StreamingInputCall(context.Background())
				if err == nil {
					if readNothing {
						for stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 64<<10)}}) == nil {
						}
						err = stream.RecvMsg(new(testpb.StreamingInputCallResponse))
					} else {
						for range 3 {
							require.NoError(t, stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 10)}}))
						}
						_, err = stream.CloseAndRecv()
					}
				}
				require.Error(t, err)
				require.NotEqual(t, resilience.ClassRejected, resilience.Classify(err), "%v", err)
			}
			require.Equal(t, resilience.StateOpen, b.State())
		})
	}
}

// hangingServer reads a client stream to its end (unless it reads
// nothing), then answers only when its caller leaves.
type hangingServer struct {
	testgrpc.UnimplementedTestServiceServer
	readNothing bool
}

func (h hangingServer) StreamingInputCall(s testgrpc.TestService_StreamingInputCallServer) error {
	for !h.readNothing {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	<-s.Context().Done()
	return s.Context().Err()
}

func startHanging(t *testing.T, readNothing bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, hangingServer{readNothing: readNothing})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
