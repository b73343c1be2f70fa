package grpcidempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup starts a test server deduplicating by a memory store, and a plain
// client of it.
func setup(t *testing.T, opts ...grpcidempotency.Option) (*grpctest.Server, *grpctest.Client) {
	t.Helper()
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(nil, append([]grpcidempotency.Option{grpcidempotency.SharedKeys()}, opts...)...)))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	cc, err := grpctest.Dial(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return srv, grpctest.NewClient(cc)
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, idempotencykey.MetadataKey, key)
}

func TestRepeatIsReplayedWithoutRunningTheHandler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault grpctest.Fault
		code  codes.Code
		runs  int
	}{
		{name: "a response", runs: 1},
		{name: "an error is stored too", fault: grpctest.Fault{Code: codes.NotFound, Message: "no such order"}, code: codes.NotFound, runs: 1},
		{name: "UNAVAILABLE frees the key", fault: grpctest.Fault{Code: codes.Unavailable}, code: codes.Unavailable, runs: 2},
		{name: "RESOURCE_EXHAUSTED frees the key", fault: grpctest.Fault{Code: codes.ResourceExhausted}, code: codes.ResourceExhausted, runs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, client := setup(t)
			srv.SetFault(grpctest.Create, tc.fault)
			ctx := withKey(t.Context(), "order-1")
			var header metadata.MD
			for i := range 2 {
				got, err := client.Create(ctx, "x", grpc.Header(&header))
				assert.Equal(t, tc.code, status.Code(err))
				if tc.code == codes.OK {
					assert.Equal(t, "created:x", got)
				} else {
					assert.Equal(t, status.Convert(err).Message(), func() string {
						if tc.fault.Message != "" {
							return tc.fault.Message
						}
						return "injected fault"
					}())
				}
				if i == 1 && tc.runs == 1 {
					assert.Equal(t, []string{"true"}, header.Get(grpcidempotency.ReplayedKey))
				}
			}
			assert.Equal(t, tc.runs, srv.Count(grpctest.Create))
		})
	}
}

func TestRefusals(t *testing.T) {
	t.Run("another request under the same key", func(t *testing.T) {
		srv, client := setup(t)
		ctx := withKey(t.Context(), "k")
		_, err := client.Create(ctx, "x")
		require.NoError(t, err)
		_, err = client.Create(ctx, "y")
		assert.Equal(t, codes.FailedPrecondition, status.Code(err))
		assert.Equal(t, 1, srv.Count(grpctest.Create))
	})
	t.Run("a repeat while the first runs", func(t *testing.T) {
		srv, client := setup(t)
		srv.SetFault(grpctest.Create, grpctest.Fault{Delay: 300 * time.Millisecond, Calls: 1})
		ctx := withKey(t.Context(), "k")
		done := make(chan error)
		go func() { _, err := client.Create(ctx, "x"); done <- err }()
		require.Eventually(t, func() bool { return srv.Count(grpctest.Create) == 1 }, time.Second, time.Millisecond)
		_, err := client.Create(ctx, "x")
		assert.Equal(t, codes.Aborted, status.Code(err))
		require.NoError(t, <-done)
	})
	t.Run("a malformed key", func(t *testing.T) {
		_, client := setup(t)
		_, err := client.Create(withKey(t.Context(), "a key with spaces"), "x")
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
	})
	t.Run("Required", func(t *testing.T) {
		srv, client := setup(t, grpcidempotency.Required())
		_, err := client.Create(t.Context(), "x")
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Zero(t, srv.Count(grpctest.Create))
	})
	t.Run("without a key: passes through", func(t *testing.T) {
		srv, client := setup(t)
		for range 2 {
			_, err := client.Create(t.Context(), "x")
			require.NoError(t, err)
		}
		assert.Equal(t, 2, srv.Count(grpctest.Create))
	})
	t.Run("keys are scoped per caller", func(t *testing.T) {
		srv, client := setup(t, grpcidempotency.Scope(func(ctx context.Context) string {
			return strings.Join(metadata.ValueFromIncomingContext(ctx, "authorization"), ",") // the test's caller identity
		}))
		for _, who := range []string{"alice", "bob"} {
			ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "k"), "authorization", who)
			_, err := client.Create(ctx, "x")
			require.NoError(t, err)
		}
		assert.Equal(t, 2, srv.Count(grpctest.Create))
	})
	t.Run("SharedKeys", func(t *testing.T) {
		srv, client := setup(t, grpcidempotency.SharedKeys())
		for _, who := range []string{"alice", "bob"} {
			ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "k"), "authorization", who)
			_, err := client.Create(ctx, "x")
			require.NoError(t, err)
		}
		assert.Equal(t, 1, srv.Count(grpctest.Create), "one namespace, by choice")
	})
	t.Run("Scope", func(t *testing.T) {
		srv, client := setup(t, grpcidempotency.Scope(func(ctx context.Context) string {
			return metadata.ValueFromIncomingContext(ctx, "account")[0]
		}))
		for _, call := range [][2]string{{"a", "token-1"}, {"a", "token-2"}, {"b", "token-1"}} {
			ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "k"), "account", call[0], "authorization", call[1])
			_, err := client.Create(ctx, "x")
			require.NoError(t, err)
		}
		assert.Equal(t, 2, srv.Count(grpctest.Create), "one run per account")
	})
	t.Run("MaxRequest", func(t *testing.T) {
		srv, client := setup(t, grpcidempotency.MaxRequest(2))
		_, err := client.Create(withKey(t.Context(), "k"), "xyz")
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Zero(t, srv.Count(grpctest.Create))
	})
}

// TestTheMiddlewaresRecordsMatch: a call's key is scoped and its request
// fingerprinted as idempotency's HTTP middleware does for a POST of the
// message to the method's path, so that the records of the versions that
// ran calls through the middleware still match.
func TestTheMiddlewaresRecordsMatch(t *testing.T) {
	store := idempotency.NewMemoryStore(0)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(wrapperspb.String("x"))
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "http://grpc"+grpctest.Create, bytes.NewReader(body))
	r.Header.Set(idempotency.Header, "k")
	r.Header.Set("Authorization", "alice")
	idempotency.Middleware(store, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})).ServeHTTP(httptest.NewRecorder(), r)

	intercept := grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(store), grpcidempotency.SharedKeys())
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotencykey.MetadataKey, "k", "authorization", "alice"))
	info := &grpc.UnaryServerInfo{FullMethod: grpctest.Create}
	runs := 0
	handler := func(context.Context, any) (any, error) { runs++; return wrapperspb.String("ran"), nil }
	_, err = intercept(ctx, wrapperspb.String("x"), info, handler)
	assert.Equal(t, codes.Internal, status.Code(err), "the middleware's record, found and replayed (an HTTP answer: unreadable)")
	_, err = intercept(ctx, wrapperspb.String("y"), info, handler)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "another request under the key")
	assert.Zero(t, runs)
}

// dropFirstAnswer loses the answer of the first call that succeeds, as a
// connection that breaks after the server answered.
func dropFirstAnswer() grpc.UnaryClientInterceptor {
	var once sync.Once
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		dropped := false
		if err == nil {
			once.Do(func() { dropped = true })
		}
		if dropped {
			return status.Error(codes.Unavailable, "connection reset after the answer")
		}
		return err
	}
}

func TestALostAnswerIsRetriedAndRunsOnce(t *testing.T) {
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())))
	require.NoError(t, err)
	defer srv.Close()
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(
		retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	cc, err := grpctest.Dial(srv.Addr, grpc.WithChainUnaryInterceptor(ic.Unary, dropFirstAnswer()), grpc.WithDisableRetry())
	require.NoError(t, err)
	defer cc.Close()
	client := grpctest.NewClient(cc)

	got, err := client.Create(t.Context(), "order", grpcclient.IdempotencyKey("order-7"))
	require.NoError(t, err)
	assert.Equal(t, "created:order", got)
	assert.Equal(t, 1, srv.Count(grpctest.Create), "the handler ran once; the retry got the stored answer")

	_, err = client.Create(t.Context(), "order")
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Count(grpctest.Create), "without a key: not retried, not deduplicated")
}

func TestAPanickingHandlerFreesTheKey(t *testing.T) {
	intercept := grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotencykey.MetadataKey, "k"))
	info := &grpc.UnaryServerInfo{FullMethod: grpctest.Create}
	assert.PanicsWithValue(t, "handler bug", func() {
		_, _ = intercept(ctx, wrapperspb.String("x"), info, func(context.Context, any) (any, error) { panic("handler bug") })
	})
	runs := 0
	for range 2 {
		resp, err := intercept(ctx, wrapperspb.String("x"), info, func(ctx context.Context, req any) (any, error) {
			runs++
			return wrapperspb.String("ok"), nil
		})
		require.NoError(t, err)
		assert.Equal(t, "ok", resp.(*wrapperspb.StringValue).GetValue())
	}
	assert.Equal(t, 1, runs, "run again after the panic, then replayed")
}

// TestARetryWhileTheFirstRunsGetsItsAnswer: an attempt timeout shorter
// than a handler that does not stop for its caller makes the client retry
// while the first attempt still runs on the server; the retries get ABORTED with a pushback of a second,
// wait it, and then get the first run's answer, replayed. The handler runs
// once.
func TestARetryWhileTheFirstRunsGetsItsAnswer(t *testing.T) {
	var runs atomic.Int64
	srv, err := grpctest.Start(grpc.ChainUnaryInterceptor(grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys()),
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if runs.Add(1) == 1 {
				time.Sleep(300 * time.Millisecond) // a write that goes on when its caller has gone
			}
			return h(context.WithoutCancel(ctx), req)
		}))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithAttemptTimeout(100*time.Millisecond))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })

	var header metadata.MD
	got, err := grpctest.NewClient(cc).Create(t.Context(), "a", grpcclient.IdempotencyKey("order-7"), grpc.Header(&header))
	require.NoError(t, err)
	assert.Equal(t, "created:a", got)
	assert.Equal(t, []string{"true"}, header.Get(grpcidempotency.ReplayedKey), "the first run's answer, replayed")
	assert.Equal(t, 1, srv.Count(grpctest.Create), "the handler ran once")
}

// jsonStore keeps its records as JSON, as the Redis and SQL stores do.
type jsonStore struct{ idempotency.Store }

func throughJSON(r idempotency.Record) idempotency.Record {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	var out idempotency.Record
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func (s jsonStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	r, err := s.Store.Begin(ctx, key, claim, lease)
	if r != nil {
		j := throughJSON(*r)
		r = &j
	}
	return r, err
}

func (s jsonStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return s.Store.Complete(ctx, key, claim, throughJSON(rec), ttl)
}

// TestBinaryMetadataIsReplayedAsSent: a -bin header is raw bytes, which a
// store keeping text would mangle; it is kept encoded and replayed as the
// handler set it.
func TestBinaryMetadataIsReplayedAsSent(t *testing.T) {
	raw := string([]byte{0xff, 0x00, 0xfe})
	srv, err := grpctest.Start(grpc.ChainUnaryInterceptor(
		grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(jsonStore{idempotency.NewMemoryStore(0)}), grpcidempotency.SharedKeys()),
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("trace-bin", raw, "plain", "text"))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("state-bin", raw))
			return h(ctx, req)
		}))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	cc, err := grpctest.Dial(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := grpctest.NewClient(cc)
	for i := range 2 {
		var header, trailer metadata.MD
		_, err := client.Create(withKey(t.Context(), "k"), "a", grpc.Header(&header), grpc.Trailer(&trailer))
		require.NoError(t, err)
		assert.Equal(t, []string{raw}, header.Get("trace-bin"), "call %d", i)
		assert.Equal(t, []string{"text"}, header.Get("plain"), "call %d", i)
		assert.Equal(t, []string{raw}, trailer.Get("state-bin"), "call %d", i)
	}
	assert.Equal(t, 1, srv.Count(grpctest.Create))
}

// TestTheMiddlewaresOptionsAreRefused: a guard given the HTTP middleware's
// Required would have let keyless calls through unprotected; NewGuard
// refuses it, pointing at this package's own.
func TestTheMiddlewaresOptionsAreRefused(t *testing.T) {
	assert.PanicsWithValue(t, "idempotency: NewGuard: option Required applies only to Middleware; for gRPC, grpcidempotency.Required", func() {
		grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(nil, idempotency.Required()))
	})
	_, cli := setup(t, grpcidempotency.Required())
	_, err := cli.Create(t.Context(), "x")
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "this package's Required")
}

// TestAnAnswerThatCannotBeKeptIsNeverRunAgain: a response that cannot be
// marshaled (invalid UTF-8 in a proto3 string), or none at all (nil,
// nil), comes after whatever the handler committed: the key is not freed;
// a repeat gets INTERNAL "response incomplete" and the handler runs once.
func TestAnAnswerThatCannotBeKeptIsNeverRunAgain(t *testing.T) {
	for name, answer := range map[string]any{
		"unmarshalable": wrapperspb.String("\xff\xfe"),
		"nil":           nil,
	} {
		t.Run(name, func(t *testing.T) {
			intercept := grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())
			ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotencykey.MetadataKey, "k"))
			info := &grpc.UnaryServerInfo{FullMethod: grpctest.Create}
			runs := 0
			handler := func(context.Context, any) (any, error) {
				runs++
				return answer, nil
			}
			_, _ = intercept(ctx, wrapperspb.String("x"), info, handler)
			for range 2 {
				_, err := intercept(ctx, wrapperspb.String("x"), info, handler)
				assert.Equal(t, codes.Internal, status.Code(err))
				assert.Contains(t, status.Convert(err).Message(), "response incomplete")
			}
			assert.Equal(t, 1, runs, "never run again")
		})
	}
}

// TestAnEmptyScopeIsRefused: a Scope that finds no identity refuses the
// call with UNAUTHENTICATED rather than share one namespace; the handler
// does not run.
func TestAnEmptyScopeIsRefused(t *testing.T) {
	intercept := grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.Scope(func(ctx context.Context) string {
		return strings.Join(metadata.ValueFromIncomingContext(ctx, "x-user"), "")
	}))
	info := &grpc.UnaryServerInfo{FullMethod: grpctest.Create}
	runs := 0
	handler := func(context.Context, any) (any, error) {
		runs++
		return wrapperspb.String("ok"), nil
	}
	anon := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotencykey.MetadataKey, "k"))
	for range 2 {
		_, err := intercept(anon, wrapperspb.String("x"), info, handler)
		assert.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	assert.Equal(t, 0, runs)
	alice := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotencykey.MetadataKey, "k", "x-user", "alice"))
	_, err := intercept(alice, wrapperspb.String("x"), info, handler)
	require.NoError(t, err)
	assert.Equal(t, 1, runs)
}
