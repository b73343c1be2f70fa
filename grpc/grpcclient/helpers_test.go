package grpcclient_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastRetry retries up to attempts times with millisecond delays.
func fastRetry(attempts int) *retrypolicy.Policy {
	return retrypolicy.New(retrypolicy.MaxAttempts(attempts), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(10*time.Second))
}

// fastPipeline is a pipeline of 3 fast attempts, with opts.
func fastPipeline(opts ...pipeline.Option) *pipeline.Pipeline {
	return pipeline.New(append([]pipeline.Option{pipeline.WithRetry(fastRetry(3))}, opts...)...)
}

// start starts a test server, closed at the end of the test.
func start(t testing.TB, opts ...grpc.ServerOption) *grpctest.Server {
	t.Helper()
	srv, err := grpctest.Start(opts...)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// dial returns a client of srv through an Interceptor made of opts.
func dial(t testing.TB, srv *grpctest.Server, opts ...grpcclient.Option) (*grpctest.Client, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpctest.Dial(srv.Addr, grpcclient.New(opts...).DialOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return grpctest.NewClient(cc), cc
}

// events records events, safe for concurrent use.
type events struct {
	mu   sync.Mutex
	list []resilience.Event
}

func (e *events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.list {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

// keys records the keys breakers are made for, safe for concurrent use.
type keys struct {
	mu   sync.Mutex
	keys []string
}

// breakers returns a maker of breakers that open after failures failures
// in a row and stay open, recording their keys.
func (k *keys) breakers(failures uint32) func(key string) *breaker.Breaker {
	return func(key string) *breaker.Breaker {
		k.mu.Lock()
		k.keys = append(k.keys, key)
		k.mu.Unlock()
		return breaker.New(key, breaker.ConsecutiveFailures(failures), breaker.OpenTimeout(time.Minute))
	}
}

func (k *keys) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}
