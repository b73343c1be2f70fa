package grpcclient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func previous(c grpctest.Call) []string { return c.Metadata.Get(grpcsignal.PreviousAttemptsKey) }

func TestUnavailableTwiceThenOKSucceedsOnAttempt3(t *testing.T) {
	srv := start(t)
	var ev events
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(&ev))))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 2})

	got, err := client.Get(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, "get:a", got)
	calls := srv.Calls(grpctest.Get)
	require.Len(t, calls, 3)
	assert.Empty(t, previous(calls[0]), "a first attempt says nothing")
	assert.Equal(t, []string{"1"}, previous(calls[1]))
	assert.Equal(t, []string{"2"}, previous(calls[2]))
	assert.Equal(t, 3, ev.count(resilience.EventAttempt), "the events of the pipeline, as over HTTP")
	assert.Equal(t, 2, ev.count(resilience.EventRetry))
}

func TestOnlyIdempotentMethodsAreRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []grpcclient.Option
		call  []grpc.CallOption
		md    metadata.MD
		calls int
		keyed bool
		sent  []string // the key header of every attempt, if set
	}{
		{name: "not idempotent, no key: tried once", calls: 1},
		{name: "a key by call option", call: []grpc.CallOption{grpcclient.IdempotencyKey("order-42")}, calls: 3, keyed: true},
		{name: "a key in the metadata", md: metadata.Pairs(idempotencykey.MetadataKey, "order-42"), calls: 3, keyed: true},
		{name: "AutoIdempotencyKey", opts: []grpcclient.Option{grpcclient.AutoIdempotencyKey()}, calls: 3, keyed: true},
		{name: "RetryMethods", opts: []grpcclient.Option{grpcclient.RetryMethods(grpctest.Create)}, calls: 3},
		{name: "an empty key by option is none", call: []grpc.CallOption{grpcclient.IdempotencyKey("")}, calls: 1},
		{name: "an empty key by hand is none", md: metadata.Pairs(idempotencykey.MetadataKey, ""), calls: 1, sent: []string{""}},
		{name: "the option's key replaces one by hand", md: metadata.Pairs(idempotencykey.MetadataKey, "hand"),
			call: []grpc.CallOption{grpcclient.IdempotencyKey("opt")}, calls: 3, keyed: true, sent: []string{"opt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t)
			var ev events
			client, _ := dial(t, srv, append(tc.opts, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(&ev))))...)
			srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable})
			ctx := t.Context()
			if tc.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tc.md)
			}
			_, err := client.Create(ctx, "x", tc.call...)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			calls := srv.Calls(grpctest.Create)
			require.Len(t, calls, tc.calls)
			keys := map[string]bool{}
			for _, c := range calls {
				for _, k := range c.Metadata.Get(idempotencykey.MetadataKey) {
					keys[k] = k != ""
				}
				if tc.sent != nil {
					assert.Equal(t, tc.sent, c.Metadata.Get(idempotencykey.MetadataKey), "one value")
				}
			}
			if tc.keyed {
				assert.Len(t, keys, 1, "the same key on every attempt")
			} else {
				assert.NotContains(t, keys, true)
			}
			if tc.calls == 1 {
				assert.Equal(t, 1, ev.count(resilience.EventNotRetried))
			}
		})
	}
}

func TestClassificationByStatusCode(t *testing.T) {
	srv := start(t)
	b := breaker.New("dep", breaker.ConsecutiveFailures(0))
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
	for _, tc := range []struct {
		code  codes.Code
		class resilience.Class
	}{
		{codes.Unavailable, resilience.ClassTransient},
		{codes.ResourceExhausted, resilience.ClassTransient},
		{codes.DeadlineExceeded, resilience.ClassTransient},
		{codes.Canceled, resilience.ClassCanceled},
		{codes.InvalidArgument, resilience.ClassPermanent},
		{codes.NotFound, resilience.ClassPermanent},
		{codes.AlreadyExists, resilience.ClassPermanent},
		{codes.PermissionDenied, resilience.ClassPermanent},
		{codes.Unauthenticated, resilience.ClassPermanent},
		{codes.FailedPrecondition, resilience.ClassPermanent},
		{codes.OutOfRange, resilience.ClassPermanent},
		{codes.Unimplemented, resilience.ClassPermanent},
		{codes.Aborted, resilience.ClassPermanent},
		{codes.Internal, resilience.ClassTerminal},
		{codes.Unknown, resilience.ClassTerminal},
		{codes.DataLoss, resilience.ClassTerminal},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			srv.Reset()
			before := b.Counts()
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: tc.code, Message: "boom"})
			_, err := client.Get(t.Context(), "a")
			require.Error(t, err)
			st := status.Convert(err)
			assert.Equal(t, tc.code, st.Code(), "the dependency's code")
			assert.Equal(t, "boom", st.Message(), "and message")
			assert.Equal(t, tc.class, resilience.Classify(err))
			want := 1
			if tc.class.Retryable() {
				want = 3
			}
			assert.Equal(t, want, srv.Count(grpctest.Get))
			after := b.Counts()
			assert.Equal(t, tc.class.Failure(), after.TotalFailures > before.TotalFailures, "a breaker failure")
			var ce *grpcclient.Error
			assert.ErrorAs(t, err, &ce)
		})
	}
}

func TestClassifyCodeChangesAClass(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()),
		grpcclient.ClassifyCode(codes.Aborted, resilience.ClassTransient),
		grpcclient.ClassifyCode(codes.Unavailable, resilience.ClassPermanent))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Aborted, Calls: 1})
	_, err := client.Get(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Count(grpctest.Get))

	srv.Reset()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	_, err = client.Get(t.Context(), "a")
	assert.True(t, resilience.IsPermanent(err))
	assert.Equal(t, 1, srv.Count(grpctest.Get))
}

func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     codes.Code
		pushback string
		calls    int
		wait     time.Duration
		class    resilience.Class
	}{
		{name: "500 ms is waited", code: codes.ResourceExhausted, pushback: "500", calls: 2, wait: 500 * time.Millisecond},
		{name: "-1 stops", code: codes.ResourceExhausted, pushback: "-1", calls: 1, class: resilience.ClassTerminal},
		{name: "malformed stops", code: codes.Unavailable, pushback: "soon", calls: 1, class: resilience.ClassTerminal},
		{name: "too large stops", code: codes.Unavailable, pushback: "9999999999", calls: 1, class: resilience.ClassTerminal},
		{name: "on a permanent code: ignored", code: codes.InvalidArgument, pushback: "-1", calls: 1, class: resilience.ClassPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t)
			b := breaker.New("dep", breaker.ConsecutiveFailures(0))
			client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: tc.code, Pushback: tc.pushback, Calls: 1})
			start := time.Now()
			_, err := client.Get(t.Context(), "a")
			elapsed := time.Since(start)
			assert.Equal(t, tc.calls, srv.Count(grpctest.Get))
			if tc.wait > 0 {
				require.NoError(t, err)
				assert.GreaterOrEqual(t, elapsed, tc.wait)
				return
			}
			assert.Equal(t, tc.code, status.Code(err), "the status code keeps its meaning")
			assert.Equal(t, tc.class, resilience.Classify(err))
			assert.Equal(t, tc.class.Failure(), b.Counts().TotalFailures == 1, "still a breaker failure")
			assert.Less(t, elapsed, 400*time.Millisecond)
		})
	}
}

func TestDeadlines(t *testing.T) {
	t.Run("a slow attempt is cut and retried within the budget", func(t *testing.T) {
		srv := start(t)
		client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(
			pipeline.WithTimeBudget(3*time.Second), pipeline.WithAttemptTimeout(150*time.Millisecond))))
		srv.SetFault(grpctest.Get, grpctest.Fault{Delay: time.Minute, Calls: 1})
		got, err := client.Get(t.Context(), "a")
		require.NoError(t, err)
		assert.Equal(t, "get:a", got)
		calls := srv.Calls(grpctest.Get)
		require.Len(t, calls, 2)
		for _, c := range calls {
			assert.Positive(t, c.Deadline)
			assert.LessOrEqual(t, c.Deadline, 150*time.Millisecond, "the attempt timeout caps each deadline")
		}
	})
	t.Run("the budget is the call's deadline", func(t *testing.T) {
		srv := start(t)
		client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithTimeBudget(300*time.Millisecond))))
		srv.SetFault(grpctest.Get, grpctest.Fault{Delay: time.Minute})
		start := time.Now()
		_, err := client.Get(t.Context(), "a")
		elapsed := time.Since(start)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.ErrorIs(t, err, retrypolicy.ErrOutOfTime)
		assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
		assert.Less(t, elapsed, 2*time.Second)
		calls := srv.Calls(grpctest.Get)
		require.Len(t, calls, 1, "one attempt used the whole budget")
		assert.LessOrEqual(t, calls[0].Deadline, 300*time.Millisecond)
	})
}

func TestCancelMidBackoffReturnsAtOnce(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Pushback: "5000"})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := client.Get(ctx, "a")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, srv.Count(grpctest.Get))
}

func TestBreakerOpensAndFailsFast(t *testing.T) {
	srv := start(t)
	var made keys
	client, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()), grpcclient.BreakerPerTarget(made.breakers(2)))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	for range 2 {
		_, err := client.Get(t.Context(), "a")
		require.Equal(t, codes.Unavailable, status.Code(err))
	}
	sent := srv.Count(grpctest.Get)
	for _, call := range []func() error{
		func() error { _, err := client.Get(t.Context(), "a"); return err },
		func() error { _, err := client.List(t.Context(), "a"); return err },
		func() error { _, err := client.Upload(t.Context(), []string{"a"}); return err },
	} {
		start := time.Now()
		err := call()
		assert.Less(t, time.Since(start), 100*time.Millisecond, "fails fast")
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.ErrorIs(t, err, breaker.ErrOpen)
	}
	assert.Equal(t, sent, srv.Count(grpctest.Get), "not sent")
	assert.Zero(t, srv.Count(grpctest.List)+srv.Count(grpctest.Upload))
	assert.Equal(t, []string{cc.Target()}, made.list(), "one breaker for the target, streams and unary calls alike")
}

func TestBreakerPerTargetIsolatesTargetsAndIsBounded(t *testing.T) {
	dead, alive, third := start(t), start(t), start(t)
	dead.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	var made keys
	ic := grpcclient.New(grpcclient.WithPipeline(fastPipeline()), grpcclient.MaxBreakers(2), grpcclient.BreakerPerTarget(made.breakers(1)))
	clients := map[*grpctest.Server]*grpctest.Client{}
	for _, srv := range []*grpctest.Server{dead, alive, third} {
		cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
		require.NoError(t, err)
		t.Cleanup(func() { cc.Close() })
		clients[srv] = grpctest.NewClient(cc)
	}
	_, err := clients[dead].Get(t.Context(), "a")
	require.Error(t, err)
	_, err = clients[dead].Get(t.Context(), "a")
	require.ErrorIs(t, err, breaker.ErrOpen)
	_, err = clients[alive].Get(t.Context(), "a")
	assert.NoError(t, err, "another target's breaker is closed")
	_, err = clients[third].Get(t.Context(), "a")
	assert.NoError(t, err, "past MaxBreakers: the pipeline's own stages")
}

// TestPastMaxBreakersNoSharedFate: targets past MaxBreakers get no
// breaker, not the pipeline's own shared by them all, which a dead one
// would open for the others (review113, for httpclient's hosts).
func TestPastMaxBreakersNoSharedFate(t *testing.T) {
	first, dead, alive := start(t), start(t), start(t)
	dead.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	var made keys
	own := breaker.New("own", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
	ic := grpcclient.New(grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(own))), grpcclient.MaxBreakers(1),
		grpcclient.BreakerPerTarget(made.breakers(1)))
	clients := map[*grpctest.Server]*grpctest.Client{}
	for _, srv := range []*grpctest.Server{first, dead, alive} {
		cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
		require.NoError(t, err)
		t.Cleanup(func() { cc.Close() })
		clients[srv] = grpctest.NewClient(cc)
	}
	_, err := clients[first].Get(t.Context(), "a")
	require.NoError(t, err)
	for range 3 {
		_, err = clients[dead].Get(t.Context(), "a")
		require.Error(t, err)
		require.NotErrorIs(t, err, breaker.ErrOpen, "past the bound: no breaker")
	}
	_, err = clients[alive].Get(t.Context(), "a")
	assert.NoError(t, err, "a healthy target past the bound is not failed by a dead one")
	assert.Equal(t, resilience.StateClosed, own.State(), "the pipeline's own breaker is not theirs")
	assert.Len(t, made.list(), 1)
}

func TestBreakerPerMethod(t *testing.T) {
	srv := start(t)
	var made keys
	client, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()), grpcclient.BreakerPerMethod(made.breakers(1)))
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Internal})
	_, err := client.Create(t.Context(), "a")
	require.Error(t, err)
	_, err = client.Create(t.Context(), "a")
	require.ErrorIs(t, err, breaker.ErrOpen)
	_, err = client.Get(t.Context(), "a")
	require.NoError(t, err, "another method's breaker is closed")
	assert.Equal(t, []string{cc.Target() + grpctest.Create, cc.Target() + grpctest.Get}, made.list())
}

func TestDialOptionsTurnGRPCsOwnRetryOff(t *testing.T) {
	srv := start(t)
	cc, err := grpctest.Dial(srv.Addr, append(grpcclient.New(grpcclient.WithPipeline(fastPipeline())).DialOptions(),
		grpc.WithDefaultServiceConfig(builtinRetry))...)
	require.NoError(t, err)
	defer cc.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	_, err = grpctest.NewClient(cc).Get(t.Context(), "a")
	require.Error(t, err)
	assert.Equal(t, 3, srv.Count(grpctest.Get), "3 attempts of ours, not 3 times 4")
}

func TestZeroInterceptorWorksAsNew(t *testing.T) {
	srv := start(t)
	var ic grpcclient.Interceptor
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	defer cc.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	got, err := grpctest.NewClient(cc).Get(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, "get:a", got)
	assert.Equal(t, 2, srv.Count(grpctest.Get))
}

// TestAPanickingInvokerIsNotCountedAndGoesOn: an invoker or streamer that
// panics (a codec's bug) is not the server's failure: the breaker counts
// it neither way, and the panic goes on.
func TestAPanickingInvokerIsNotCountedAndGoesOn(t *testing.T) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(0))
	ic := grpcclient.New(grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
	cc, err := grpctest.Dial("127.0.0.1:1")
	require.NoError(t, err)
	defer cc.Close()
	panicking := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		panic("codec bug")
	}
	assert.PanicsWithValue(t, "codec bug", func() {
		_ = ic.Unary(t.Context(), grpctest.Get, nil, nil, cc, panicking)
	})
	assert.Equal(t, uint32(0), b.Counts().TotalFailures)
	assert.Equal(t, uint32(1), b.Counts().TotalExclusions)
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	assert.NoError(t, ic.Unary(t.Context(), grpctest.Get, nil, nil, cc, ok))

	panicky := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		panic("stream bug")
	}
	assert.PanicsWithValue(t, "stream bug", func() {
		_, _ = ic.Stream(t.Context(), grpctest.ListDesc, cc, grpctest.List, panicky)
	})
	assert.Equal(t, uint32(0), b.Counts().TotalFailures)
	assert.Equal(t, uint32(2), b.Counts().TotalExclusions)
}

func TestManyGoroutinesAtOnce(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(fastRetry(10)))),
		grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker { return breaker.New(target, breaker.ConsecutiveFailures(0)) }))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 40})
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Calls: 20})
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 20, After: 1})
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 20 {
		wg.Go(func() {
			for i := range 5 {
				switch (g + i) % 3 {
				case 0:
					if got, err := client.Get(t.Context(), "a"); err != nil || got != "get:a" {
						errs <- errors.Join(err, errors.New("get: "+got))
					}
				case 1:
					if got, err := client.List(t.Context(), "l"); err != nil || len(got) != 3 {
						errs <- errors.Join(err, errors.New("list"))
					}
				default:
					if got, err := client.Upload(t.Context(), []string{"x", "y"}); err != nil || got != "x,y" {
						errs <- errors.Join(err, errors.New("upload: "+got))
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

const builtinRetry = `{"methodConfig": [{"name": [{"service": "resiliencekit.grpctest.Echo"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// TestAttemptTimeoutIsNamed: a unary call cut short by the pipeline's
// attempt timeout says so, as over HTTP: its error matches
// pipeline.ErrAttemptTimeout, and still DEADLINE_EXCEEDED.
func TestAttemptTimeoutIsNamed(t *testing.T) {
	srv, err := grpctest.Start()
	require.NoError(t, err)
	defer srv.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 2 * time.Second})
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithAttemptTimeout(50*time.Millisecond))))
	conn, err := grpc.NewClient(srv.Addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer conn.Close()
	_, err = grpctest.NewClient(conn).Get(t.Context(), "order-1")
	require.Error(t, err)
	assert.ErrorIs(t, err, pipeline.ErrAttemptTimeout)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	assert.Contains(t, err.Error(), "attempt timeout")
	assert.EqualValues(t, 2, srv.Count(grpctest.Get), "retried: an attempt timeout is transient")
}
