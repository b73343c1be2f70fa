package grpcsignal_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
)

const r99Method = "/review99.Svc/Do"

// r99Serve serves r99Method with h, behind the server options opts.
func r99Serve(t *testing.T, h func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "review99.Svc", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			hh := func(ctx context.Context, req any) (any, error) { return h(ctx, req.(*wrapperspb.StringValue)) }
			if ic == nil {
				return hh(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: r99Method}, hh)
		},
	}}}, struct{}{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func r99Dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// A business error of the bottom service (FAILED_PRECONDITION with a
// google.rpc.ErrorInfo saying why) goes through a middle hop whose handler
// returns its outbound call's error as it is. Through a plain chain, the
// top caller gets the code, the message and the details. With the middle's
// outbound call through grpcclient and grpcsignal's interceptor installed
// as the docs say, nothing was retried anywhere (FAILED_PRECONDITION is
// permanent, one attempt), yet the answer is rewritten: the message and
// the details are gone, so a caller that branches on ErrorInfo.Reason
// (or shows a BadRequest's field violations) no longer can.
func TestReview99BusinessErrorDetailsSurviveAMiddleHop(t *testing.T) {
	info := &errdetails.ErrorInfo{Reason: "INSUFFICIENT_FUNDS", Domain: "shop.example"}
	bottom := r99Serve(t, func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		st, _ := status.New(codes.FailedPrecondition, "account 42 has 3 EUR, needs 10").WithDetails(info)
		return nil, st.Err()
	})
	for _, resilient := range []bool{false, true} {
		var dial []grpc.DialOption
		var srvOpts []grpc.ServerOption
		if resilient {
			dial = grpcclient.New(grpcclient.RetryMethods(r99Method)).DialOptions()
			srvOpts = []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor)}
		}
		down := r99Dial(t, bottom, dial...)
		middle := r99Serve(t, func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			out := new(wrapperspb.StringValue)
			if err := down.Invoke(ctx, r99Method, in, out); err != nil {
				return nil, err // passed on as it is
			}
			return out, nil
		}, srvOpts...)
		top := r99Dial(t, middle)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var trailer metadata.MD
		err := top.Invoke(ctx, r99Method, wrapperspb.String("pay"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
		cancel()
		st := status.Convert(err)
		var reason string
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				reason = ei.Reason
			}
		}
		t.Logf("resilient=%v: %v %q, details reason %q, pushback %q", resilient, st.Code(), st.Message(), reason, trailer.Get(grpcsignal.PushbackKey))
		if st.Code() != codes.FailedPrecondition {
			t.Errorf("resilient=%v: code %v, want FAILED_PRECONDITION", resilient, st.Code())
		}
		if reason != "INSUFFICIENT_FUNDS" {
			t.Errorf("resilient=%v: the bottom service's ErrorInfo (reason INSUFFICIENT_FUNDS) was lost on the way: %v %q, details %v; a plain chain passes it on", resilient, st.Code(), st.Message(), st.Details())
		}
	}
}
