package grpcclient_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// hangServer132 answers every stream: headers first if headers, then
// nothing until the client's deadline.
func hangServer132(t *testing.T, headers bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var m emptypb.Empty
		_ = ss.RecvMsg(&m)
		if headers {
			_ = ss.SendHeader(metadata.Pairs("x", "y"))
		}
		<-ss.Context().Done() // its own dependency hangs
		return ss.Context().Err()
	}))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func watch132(t *testing.T, headers bool) *breaker.Breaker {
	b := breaker.New("hang", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b))))
	addr := hangServer132(t, headers)
	cc, err := grpc.NewClient(addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	desc := &grpc.StreamDesc{ServerStreams: true}
	for i := 0; i < 6 && b.State() == resilience.StateClosed; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		cs, err := cc.NewStream(ctx, desc, "/x.Svc/Get")
		if err == nil {
			_ = cs.SendMsg(&emptypb.Empty{})
			_ = cs.CloseSend()
			var m emptypb.Empty
			for cs.RecvMsg(&m) == nil {
			}
		}
		cancel()
	}
	return b
}

// Control: a server that hangs before its headers opens the breaker.
func TestReview132HangBeforeHeadersOpens(t *testing.T) {
	if b := watch132(t, false); b.State() != resilience.StateOpen {
		t.Fatalf("breaker %v, counts %+v", b.State(), b.Counts())
	}
}

// A server that sends its headers and then hangs (its own dependency dead)
// until every caller's deadline: the breaker never counts it.
func TestReview132HangAfterHeadersOpens(t *testing.T) {
	if b := watch132(t, true); b.State() != resilience.StateOpen {
		t.Fatalf("breaker %v after 6 streams that a server answered with headers and then hung until the deadline, want open; counts %+v", b.State(), b.Counts())
	}
}
