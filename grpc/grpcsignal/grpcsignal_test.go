package grpcsignal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		values    []string
		d         time.Duration
		retry, ok bool
	}{
		{values: nil},
		{values: []string{"500"}, d: 500 * time.Millisecond, retry: true, ok: true},
		{values: []string{"0"}, retry: true, ok: true},
		{values: []string{"-1"}, ok: true},
		{values: []string{"abc"}, ok: true},
		{values: []string{""}, ok: true},
		{values: []string{" 5"}, ok: true},
		{values: []string{"2147483648"}, ok: true},
		{values: []string{"1", "2"}, ok: true},
	} {
		t.Run(fmt.Sprint(tc.values), func(t *testing.T) {
			md := metadata.MD{}
			if tc.values != nil {
				md[grpcsignal.PushbackKey] = tc.values
			}
			d, retry, ok := grpcsignal.Pushback(md)
			assert.Equal(t, tc.d, d)
			assert.Equal(t, tc.retry, retry)
			assert.Equal(t, tc.ok, ok)
		})
	}
}

func FuzzPushback(f *testing.F) {
	for _, s := range []string{"500", "-1", "abc", "2147483647", "+5", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, retry, ok := grpcsignal.Pushback(metadata.MD{grpcsignal.PushbackKey: {v}})
		if !ok {
			t.Fatal("a value is a pushback")
		}
		if !retry && d != 0 || d < 0 || d > (1<<31)*time.Millisecond {
			t.Fatalf("Pushback(%q) = %v, %v", v, d, retry)
		}
	})
}

func TestPreviousAttempts(t *testing.T) {
	for v, want := range map[string]int{"": 0, "1": 1, "3": 3, "-1": 0, "x": 0} {
		ctx := t.Context()
		if v != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(grpcsignal.PreviousAttemptsKey, v))
		}
		assert.Equal(t, want, grpcsignal.PreviousAttempts(ctx), v)
	}
}

func TestCode(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "down")
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"nil", nil, codes.OK},
		{"out of time", &retrypolicy.Error{Reason: retrypolicy.ErrOutOfTime, Last: status.Error(codes.DeadlineExceeded, "")}, codes.DeadlineExceeded},
		{"out of time, no answer", &retrypolicy.Error{Reason: retrypolicy.ErrOutOfTime, Last: errors.New("reset")}, codes.DeadlineExceeded},
		{"the next delay would not fit: the answer's code", &retrypolicy.Error{Reason: retrypolicy.ErrOutOfTime, Last: unavailable}, codes.Unavailable},
		{"breaker open", fmt.Errorf("x: %w", breaker.ErrOpen), codes.Unavailable},
		{"the dependency's code", &retrypolicy.Error{Reason: retrypolicy.ErrMaxAttempts, Last: status.Error(codes.NotFound, "")}, codes.NotFound},
		{"attempts timed out", &retrypolicy.Error{Reason: retrypolicy.ErrMaxAttempts, Last: context.DeadlineExceeded}, codes.DeadlineExceeded},
		{"terminal", resilience.Terminal(errors.New("tls")), codes.Unknown},
		{"permanent", resilience.Permanent(errors.New("bad")), codes.Internal},
		{"canceled", context.Canceled, codes.Canceled},
		{"transient", errors.New("reset"), codes.Unavailable},
	} {
		assert.Equal(t, tc.code, grpcsignal.Code(tc.err), tc.name)
	}
}

// front is a service in the middle of a chain: its Get calls the backend
// through a resilient client and returns what it gets.
func front(t *testing.T, backend *grpctest.Client) *grpc.Server {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: grpctest.Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				if in.GetValue() == "bad" {
					return nil, status.Error(codes.InvalidArgument, "the handler's own error")
				}
				got, err := backend.Get(ctx, in.GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(got), nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: grpctest.Get}, h)
		}}},
	}, nil)
	return srv
}

func TestOneLayerRetries(t *testing.T) {
	backend, err := grpctest.Start()
	require.NoError(t, err)
	defer backend.Close()
	retry := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
	ic := grpcclient.New(grpcclient.WithPipeline(retry))
	bcc, err := grpctest.Dial(backend.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	defer bcc.Close()

	srv := front(t, grpctest.NewClient(bcc))
	lis := listen(t)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	b := breaker.New("front", breaker.ConsecutiveFailures(0))
	fcc, err := grpctest.Dial(lis.Addr().String(), grpcclient.New(grpcclient.WithPipeline(retry.With(pipeline.WithBreaker(b)))).DialOptions()...)
	require.NoError(t, err)
	defer fcc.Close()
	client := grpctest.NewClient(fcc)

	backend.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	var trailer metadata.MD
	_, err = client.Get(t.Context(), "a", grpc.Trailer(&trailer))
	assert.Equal(t, codes.Unavailable, status.Code(err), "the code keeps its meaning")
	assert.Equal(t, grpcsignal.NoRetryMessage, status.Convert(err).Message())
	assert.Equal(t, []string{"-1"}, trailer.Get(grpcsignal.PushbackKey))
	assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err), "not retried")
	assert.Equal(t, uint32(1), b.Counts().TotalFailures, "still a breaker failure")
	assert.Equal(t, 3, backend.Count(grpctest.Get), "3 attempts at the bottom, not 3 times 3")

	trailer = nil
	_, err = client.Get(t.Context(), "bad", grpc.Trailer(&trailer))
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Empty(t, trailer.Get(grpcsignal.PushbackKey), "the handler's own errors pass as they are")
}

func TestErrorOfNil(t *testing.T) {
	assert.NoError(t, grpcsignal.Error(t.Context(), nil))
}

// serverStream is a grpc.ServerStream whose context carries st.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

func TestStreamServerInterceptor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     codes.Code
		pushback []string
	}{
		{name: "a pipeline's error", err: &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: status.Error(codes.Unavailable, "x")}, code: codes.Unavailable, pushback: []string{"-1"}},
		{name: "the handler's own", err: status.Error(codes.NotFound, "x"), code: codes.NotFound},
		{name: "none", code: codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &recordingStream{}
			ss := serverStream{ctx: grpc.NewContextWithServerTransportStream(t.Context(), st)}
			err := grpcsignal.StreamServerInterceptor(nil, ss, nil, func(any, grpc.ServerStream) error { return tc.err })
			assert.Equal(t, tc.code, status.Code(err))
			assert.Equal(t, tc.pushback, st.trailer.Get(grpcsignal.PushbackKey))
		})
	}
}

type recordingStream struct {
	grpc.ServerTransportStream
	trailer metadata.MD
}

func (s *recordingStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}
