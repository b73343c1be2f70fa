package grpcclient_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/testdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The metadata that interopServer's interceptor acts on: a pushback to
// add to the trailer of a failing call, and a delay before the handler.
const (
	pushbackKey = "x-test-pushback-ms"
	sleepKey    = "x-test-sleep-ms"
)

// interopServer is grpc-go's interop test service
// (google.golang.org/grpc/interop) on 127.0.0.1, counting the calls its
// handlers got; an interceptor adds a grpc-retry-pushback-ms trailer to a
// failing call that asks for one, which the interop service cannot.
type interopServer struct {
	addr  string
	calls atomic.Int64
}

func startInterop(t testing.TB, opts ...grpc.ServerOption) *interopServer {
	t.Helper()
	s := &interopServer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts = append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get(sleepKey); len(v) == 1 {
				ms, _ := strconv.Atoi(v[0])
				select {
				case <-time.After(time.Duration(ms) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			s.calls.Add(1)
			resp, err := h(ctx, req)
			if v := md.Get(pushbackKey); err != nil && len(v) == 1 {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", v[0]))
			}
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			s.calls.Add(1)
			return h(srv, ss)
		}))
	gs := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(gs, interop.NewTestServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	s.addr = lis.Addr().String()
	return s
}

// attempts counts the attempts that the Interceptor makes: it is chained
// after it, so it sees each one.
type attempts struct{ n atomic.Int64 }

func (a *attempts) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			a.n.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			a.n.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// interopClient dials addr through an Interceptor on p, with dial
// options extra (transport credentials among them; insecure if none),
// counting attempts in n.
func interopClient(t testing.TB, addr string, p *pipeline.Pipeline, n *attempts, extra ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods("/grpc.testing.TestService/UnaryCall"))
	opts := append(ic.DialOptions(), n.dialOptions()...)
	if len(extra) == 0 {
		extra = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, append(opts, extra...)...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func payload(n int) *testpb.Payload { return &testpb.Payload{Body: make([]byte, n)} }

// TestLocalErrorsAgainstInteropServer: errors that the dependency did not
// cause, made by grpc-go on the client's side before or after the
// exchange, are tried once, are of class rejected (the caller's
// cancellation: canceled) and leave the breaker's counts as they were: no
// failure and no success. grpc-go's own retry retries none of them
// either. Each row runs against grpc-go's interop server.
func TestLocalErrorsAgainstInteropServer(t *testing.T) {
	srv := startInterop(t)
	small := startInterop(t, grpc.MaxRecvMsgSize(1<<10)) // a server that takes 1 KiB at most
	tlsCreds, err := credentials.NewServerTLSFromFile(testdata.Path("x509/server1_cert.pem"), testdata.Path("x509/server1_key.pem"))
	require.NoError(t, err)
	tlsSrv := startInterop(t, grpc.Creds(tlsCreds))

	rows := []struct {
		name         string
		server       *interopServer
		dial         []grpc.DialOption
		call         func(ctx context.Context, c testgrpc.TestServiceClient) error
		wantAttempts int64
		wantServed   int64
		wantCode     codes.Code
		wantClass    resilience.Class
	}{
		{
			name: "request over the client's MaxCallSendMsgSize", server: srv,
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: payload(2 << 10)}, grpc.MaxCallSendMsgSize(1<<10))
				return err
			},
			wantAttempts: 1, wantServed: 0, wantCode: codes.ResourceExhausted, wantClass: resilience.ClassRejected,
		},
		{
			name: "response over the client's MaxCallRecvMsgSize", server: srv,
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 4 << 10}, grpc.MaxCallRecvMsgSize(1<<10))
				return err
			},
			wantAttempts: 1, wantServed: 1, wantCode: codes.ResourceExhausted, wantClass: resilience.ClassRejected,
		},
		{
			name: "request over the server's MaxRecvMsgSize", server: small,
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: payload(2 << 10)})
				return err
			},
			wantAttempts: 1, wantServed: 0, wantCode: codes.ResourceExhausted, wantClass: resilience.ClassRejected,
		},
		{
			name: "request that does not marshal (a string that is not UTF-8)", server: srv,
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Message: "\xff"}})
				return err
			},
			wantAttempts: 1, wantServed: 0, wantCode: codes.Internal, wantClass: resilience.ClassRejected,
		},
		{
			name: "server certificate not trusted (TLS verification)", server: tlsSrv,
			dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{ServerName: "x.test.example.com"}))},
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
				return err
			},
			wantAttempts: 1, wantServed: 0, wantCode: codes.Unavailable, wantClass: resilience.ClassRejected,
		},
		{
			name: "caller cancels during the attempt", server: srv,
			call: func(ctx context.Context, c testgrpc.TestServiceClient) error {
				ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, sleepKey, "5000"))
				time.AfterFunc(50*time.Millisecond, cancel)
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
				return err
			},
			wantAttempts: 1, wantServed: 0, wantCode: codes.Canceled, wantClass: resilience.ClassCanceled,
		},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			b := breaker.New("interop", breaker.ConsecutiveFailures(1))
			var n attempts
			c := interopClient(t, tc.server.addr, fastPipeline(pipeline.WithBreaker(b)), &n, tc.dial...)
			before := tc.server.calls.Load()

			err := tc.call(t.Context(), c)

			require.Error(t, err)
			counts := b.Counts()
			t.Logf("attempts %d, served %d, breaker %+v, %v %v: %v", n.n.Load(), tc.server.calls.Load()-before, counts, status.Code(err), resilience.Classify(err), err)
			assert.Equal(t, tc.wantAttempts, n.n.Load(), "attempts")
			assert.Equal(t, tc.wantServed, tc.server.calls.Load()-before, "calls the server's handler got")
			assert.Equal(t, tc.wantCode, status.Code(err))
			assert.Equal(t, tc.wantClass, resilience.Classify(err))
			assert.Zero(t, counts.TotalFailures, "breaker failures")
			assert.Zero(t, counts.TotalSuccesses, "breaker successes")
			assert.Equal(t, resilience.StateClosed, b.State())

			// The same breaker lets a healthy call through afterwards.
			_, err = c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.WaitForReady(false))
			if tc.server != tlsSrv {
				require.NoError(t, err)
			}
		})
	}
}

// TestOversizeCallsDoNotOpenTheBreaker is the scenario: three
// requests over MaxCallSendMsgSize used to be tried 4 times each and open
// a breaker of 3 failures, rejecting a small call to the healthy server.
func TestOversizeCallsDoNotOpenTheBreaker(t *testing.T) {
	srv := startInterop(t)
	b := breaker.New("interop", breaker.ConsecutiveFailures(3))
	var n attempts
	c := interopClient(t, srv.addr, pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(fastRetry(4))), &n)
	for range 3 {
		_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{Payload: payload(2 << 10)}, grpc.MaxCallSendMsgSize(1<<10))
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
	}
	_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	require.NoError(t, err)
	assert.EqualValues(t, 4, n.n.Load(), "one attempt each")
	assert.EqualValues(t, 1, b.Counts().TotalSuccesses)
	assert.Zero(t, b.Counts().TotalFailures)
}

// TestPushbackPastBudgetKeepsTheServersStatus: a server's UNAVAILABLE
// with a pushback longer than the time left ends the call at once with
// that UNAVAILABLE (transient: an upstream client may retry it), not with
// a DEADLINE_EXCEEDED long before the deadline; it still matches
// retrypolicy.ErrOutOfTime, and the breaker counts one failure: the
// dependency answered that it is unavailable.
func TestPushbackPastBudgetKeepsTheServersStatus(t *testing.T) {
	srv := startInterop(t)
	b := breaker.New("interop", breaker.ConsecutiveFailures(100))
	var n attempts
	c := interopClient(t, srv.addr, pipeline.New(pipeline.WithTimeBudget(500*time.Millisecond), pipeline.WithBreaker(b), pipeline.WithRetry(fastRetry(4))), &n)
	ctx := metadata.AppendToOutgoingContext(t.Context(), pushbackKey, "2000")
	start := time.Now()
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable), Message: "shedding load"}})
	took := time.Since(start)
	t.Logf("%v after %v, %d attempt(s), breaker %+v", err, took, n.n.Load(), b.Counts())
	require.Error(t, err)
	st := status.Convert(err)
	assert.Equal(t, codes.Unavailable, st.Code())
	assert.Equal(t, "shedding load", st.Message())
	assert.Equal(t, resilience.ClassTransient, resilience.Classify(err))
	assert.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
	assert.Less(t, took, 250*time.Millisecond, "at once, not at the deadline")
	assert.EqualValues(t, 1, n.n.Load())
	assert.EqualValues(t, 1, b.Counts().TotalFailures)

	// A pushback that fits is waited, and retried.
	n.n.Store(0)
	ctx = metadata.AppendToOutgoingContext(t.Context(), pushbackKey, "50")
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable)}})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.EqualValues(t, 4, n.n.Load())
}

// TestStreamFailingAfterCommitIsAFailure: ten bidirectional streams of the
// interop server, each failing with UNAVAILABLE after its first response
// (committed: not retried), are ten failures to the breaker and ten calls
// that ended with an error to the listener, not ten successes.
func TestStreamFailingAfterCommitIsAFailure(t *testing.T) {
	srv := startInterop(t)
	b := breaker.New("interop", breaker.ConsecutiveFailures(100))
	var ev events
	var n attempts
	c := interopClient(t, srv.addr, fastPipeline(pipeline.WithBreaker(b), pipeline.WithListener(&ev)), &n)
	var doneErrs []error
	for range 10 {
		st, err := c.FullDuplexCall(t.Context())
		require.NoError(t, err)
		require.NoError(t, st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}}}))
		_, err = st.Recv()
		require.NoError(t, err, "the first response commits the stream")
		require.NoError(t, st.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable), Message: "gone"}}))
		_, err = st.Recv()
		require.Equal(t, codes.Unavailable, status.Code(err), "grpc-go's error, as it is")
	}
	require.Eventually(t, func() bool { return ev.count(resilience.EventCallDone) == 10 }, 5*time.Second, time.Millisecond)
	ev.mu.Lock()
	for _, e := range ev.list {
		if e.Kind == resilience.EventCallDone {
			doneErrs = append(doneErrs, e.Err)
		}
	}
	ev.mu.Unlock()
	for _, err := range doneErrs {
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err), "a failure, but not retried: the stream had committed")
	}
	counts := b.Counts()
	t.Logf("breaker after 10 streams failing after commit: %+v; attempts %d", counts, n.n.Load())
	assert.EqualValues(t, 10, counts.TotalFailures)
	assert.Zero(t, counts.TotalSuccesses)
	assert.EqualValues(t, 10, n.n.Load(), "committed streams are never retried")
	assert.EqualValues(t, 10, srv.calls.Load())

	// A stream that ends well is a success.
	st, err := c.FullDuplexCall(t.Context())
	require.NoError(t, err)
	require.NoError(t, st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}}}))
	_, err = st.Recv()
	require.NoError(t, err)
	require.NoError(t, st.CloseSend())
	_, err = st.Recv()
	require.Equal(t, "EOF", err.Error())
	require.Eventually(t, func() bool { return b.Counts().TotalSuccesses == 1 }, 5*time.Second, time.Millisecond)
}

// TestReplayBufferOverflowIsReported: a stream of a retried method whose
// messages outgrow MaxReplayBuffer commits, and when it then fails before
// its response began it is not retried; the call's error, as the
// listener hears it, matches ErrReplayBufferFull.
func TestReplayBufferOverflowIsReported(t *testing.T) {
	srv := startInterop(t)
	var ev events
	var n attempts
	ic := grpcclient.New(
		grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(&ev))),
		grpcclient.RetryMethods("/grpc.testing.TestService/FullDuplexCall"),
		grpcclient.MaxReplayBuffer(100))
	cc, err := grpc.NewClient(srv.addr, append(append(ic.DialOptions(), n.dialOptions()...), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer cc.Close()
	st, err := testgrpc.NewTestServiceClient(cc).FullDuplexCall(t.Context())
	require.NoError(t, err)
	require.NoError(t, st.Send(&testpb.StreamingOutputCallRequest{
		Payload:        payload(200),
		ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable), Message: "try elsewhere"},
	}))
	_, err = st.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Eventually(t, func() bool { return ev.count(resilience.EventCallDone) == 1 }, 5*time.Second, time.Millisecond)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	notRetried := 0
	for _, e := range ev.list {
		switch e.Kind {
		case resilience.EventCallDone:
			assert.ErrorIs(t, e.Err, grpcclient.ErrReplayBufferFull)
		case resilience.EventNotRetried:
			notRetried++
			assert.ErrorIs(t, e.Err, grpcclient.ErrReplayBufferFull)
		}
	}
	assert.Equal(t, 1, notRetried, "the retry left out is reported")
	assert.EqualValues(t, 1, n.n.Load(), "not retried")
}

// TestHandInstalledInterceptorsBesideAServiceConfigRetry: Unary installed
// by hand, beside a service config retry policy, multiplies the attempts
// (grpc-go retries each of the pipeline's); grpc.WithDisableRetry, which
// DialOptions includes, makes them the pipeline's alone.
func TestHandInstalledInterceptorsBesideAServiceConfigRetry(t *testing.T) {
	srv := startInterop(t)
	const serviceConfig = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	ic := grpcclient.New(grpcclient.WithPipeline(fastPipeline()), grpcclient.RetryMethods("/grpc.testing.TestService/UnaryCall"))
	failing := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable)}}
	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		want int64
	}{
		{"by hand, grpc-go's retry on", []grpc.DialOption{grpc.WithUnaryInterceptor(ic.Unary)}, 3 * 4},
		{"by hand, with grpc.WithDisableRetry", []grpc.DialOption{grpc.WithUnaryInterceptor(ic.Unary), grpc.WithDisableRetry()}, 3},
		{"DialOptions", ic.DialOptions(), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append(tc.opts, grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithTransportCredentials(insecure.NewCredentials()))
			cc, err := grpc.NewClient(srv.addr, opts...)
			require.NoError(t, err)
			defer cc.Close()
			before := srv.calls.Load()
			_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(t.Context(), failing)
			require.Equal(t, codes.Unavailable, status.Code(err))
			t.Logf("%s: %d calls at the server", tc.name, srv.calls.Load()-before)
			assert.Equal(t, tc.want, srv.calls.Load()-before)
		})
	}
}

// TestStreamLocalErrorsAreNotCounted: on a stream too, a message over the
// client's size limits, sent before the response began or received after
// it, is the client's own error: one attempt, and the breaker counts
// neither a failure nor a success.
func TestStreamLocalErrorsAreNotCounted(t *testing.T) {
	srv := startInterop(t)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c testgrpc.TestServiceClient) error
	}{
		{"request over MaxCallSendMsgSize", func(t *testing.T, c testgrpc.TestServiceClient) error {
			st, err := c.FullDuplexCall(t.Context(), grpc.MaxCallSendMsgSize(1<<10))
			require.NoError(t, err)
			return st.Send(&testpb.StreamingOutputCallRequest{Payload: payload(2 << 10)})
		}},
		{"response over MaxCallRecvMsgSize, after commit", func(t *testing.T, c testgrpc.TestServiceClient) error {
			st, err := c.FullDuplexCall(t.Context(), grpc.MaxCallRecvMsgSize(1<<10))
			require.NoError(t, err)
			require.NoError(t, st.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}, {Size: 4 << 10}}}))
			_, err = st.Recv()
			require.NoError(t, err)
			_, err = st.Recv()
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := breaker.New("interop", breaker.ConsecutiveFailures(1))
			var ev events
			var n attempts
			c := interopClient(t, srv.addr, fastPipeline(pipeline.WithBreaker(b), pipeline.WithListener(&ev)), &n)
			err := tc.run(t, c)
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			require.Eventually(t, func() bool { return ev.count(resilience.EventCallDone) == 1 }, 5*time.Second, time.Millisecond)
			counts := b.Counts()
			t.Logf("attempts %d, breaker %+v", n.n.Load(), counts)
			assert.EqualValues(t, 1, n.n.Load())
			assert.Zero(t, counts.TotalFailures)
			assert.Zero(t, counts.TotalSuccesses)
			assert.EqualValues(t, 1, counts.TotalExclusions)
		})
	}
}

// TestServersResourceExhaustedStaysTransient: a RESOURCE_EXHAUSTED that
// the server sent for a reason of its own (a quota), not grpc-go's message
// size limit, is the dependency's: retried, and a breaker failure.
func TestServersResourceExhaustedStaysTransient(t *testing.T) {
	srv := startInterop(t)
	b := breaker.New("interop", breaker.ConsecutiveFailures(100))
	var n attempts
	c := interopClient(t, srv.addr, fastPipeline(pipeline.WithBreaker(b)), &n)
	_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.ResourceExhausted), Message: "quota exceeded"}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, resilience.ClassTransient, resilience.Classify(err))
	assert.EqualValues(t, 3, n.n.Load(), "retried")
	assert.EqualValues(t, 1, b.Counts().TotalFailures)
}
