package grpcclient_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r164Watch = "/r164.P/Watch"

func r164StartStream(t *testing.T, fn func(ss grpc.ServerStream) error) (*atomic.Int64, string) {
	t.Helper()
	var calls atomic.Int64
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		calls.Add(1)
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		return fn(ss)
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return &calls, lis.Addr().String()
}

func r164StreamClient(t *testing.T, addr string, p *pipeline.Pipeline) *grpc.ClientConn {
	t.Helper()
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r164Watch))
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, ic.DialOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func r164OpenWatch(ctx context.Context, cc *grpc.ClientConn) (grpc.ClientStream, error) {
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}, r164Watch)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(wrapperspb.String("x")); err != nil && err != io.EOF {
		return nil, err
	}
	return cs, cs.CloseSend()
}

// (2) streams: the caller's own cancellation, before or after a message
// came, is neither retried nor counted by the breaker.
func TestReview164StreamCallerCancel(t *testing.T) {
	for _, first := range []bool{false, true} {
		name := "beforeMessage"
		if first {
			name = "afterMessage"
		}
		t.Run(name, func(t *testing.T) {
			calls, addr := r164StartStream(t, func(ss grpc.ServerStream) error {
				if first {
					if err := ss.SendMsg(wrapperspb.String("m")); err != nil {
						return err
					}
				}
				<-ss.Context().Done()
				return status.FromContextError(ss.Context().Err()).Err()
			})
			p, b := r164Breaker()
			cc := r164StreamClient(t, addr, p)
			for range 4 {
				ctx, cancel := context.WithCancel(context.Background())
				cs, err := r164OpenWatch(ctx, cc)
				if err != nil {
					t.Fatal(err)
				}
				if first {
					if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
						t.Fatal(err)
					}
				}
				time.AfterFunc(30*time.Millisecond, cancel)
				err = cs.RecvMsg(new(wrapperspb.StringValue))
				if status.Code(err) != codes.Canceled {
					t.Errorf("got %v, want CANCELED", err)
				}
				cancel()
			}
			time.Sleep(50 * time.Millisecond) // the pipeline's call ends with the stream
			if n := calls.Load(); n != 4 {
				t.Errorf("server saw %d streams for 4 canceled calls", n)
			}
			if b.State() != resilience.StateClosed {
				t.Errorf("breaker %v after the caller's own cancellations", b.State())
			}
		})
	}
}

// (2) a stream's hostile pushback never waits past MaxDelay; a repeated
// or malformed one stops the retries.
func TestReview164StreamPushback(t *testing.T) {
	for _, tc := range []struct {
		vals  []string
		retry bool
	}{{[]string{"2147483647"}, true}, {[]string{"5", "5"}, false}, {[]string{"x"}, false}, {[]string{"-1"}, false}} {
		t.Run(tc.vals[0], func(t *testing.T) {
			calls, addr := r164StartStream(t, func(ss grpc.ServerStream) error {
				md := metadata.MD{}
				md["grpc-retry-pushback-ms"] = tc.vals
				ss.SetTrailer(md)
				return status.Error(codes.Unavailable, "busy")
			})
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(40*time.Millisecond))))
			cc := r164StreamClient(t, addr, p)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			cs, err := r164OpenWatch(ctx, cc)
			if err == nil {
				err = cs.RecvMsg(new(wrapperspb.StringValue))
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v", err)
			}
			if d := time.Since(start); d > 800*time.Millisecond {
				t.Errorf("took %v", d)
			}
			want := int64(1)
			if tc.retry {
				want = 3
			}
			if n := calls.Load(); n != want {
				t.Errorf("server saw %d streams, want %d", n, want)
			}
		})
	}
}
