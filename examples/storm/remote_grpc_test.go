package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestRemoteGRPC: over -grpc -remote, the backends run in a process of
// their own (this test binary, as TestMain serves), reached over gRPC.
// In a healthy scenario and with a dead host in three, the calls ok and
// backend requests of no retry (one RPC per attempt) and of the default
// Pipeline are those of virtual time, counted by the backends' process
// and sent back; the Pipeline's row goes through grpcclient's
// interceptor (its attempts' errors carry a gRPC status, which only
// grpcclient gives them, and the transport of attempts is not used for
// it), and every attempt it makes is a request the remote backend counts.
func TestRemoteGRPC(t *testing.T) {
	o, err := parseArgs([]string{"-grpc", "-remote"})
	require.NoError(t, err)
	assert.True(t, o.realtime && o.grpc && o.remote && !o.http, "-grpc -remote: gRPC to the backends' process")
	assert.Contains(t, o.transport(), "gRPC over TCP on 127.0.0.1 to the backends in a process of their own")

	saved := scenarios
	t.Cleanup(func() { scenarios = saved })
	scenarios = remoteScenarios()

	tr, stop, err := realtimeTransport(o) // starts this test binary as the backends' process
	require.NoError(t, err)
	defer stop()
	require.NotNil(t, tr.pipelines, "the Pipeline's rows through grpcclient")
	var attemptRuns, pipelineRuns atomic.Int64
	attempts, pipelines := tr.attempts, tr.pipelines
	tr.attempts = func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		attemptRuns.Add(1)
		return attempts(b)
	}
	tr.pipelines = func(b *backend, p *pipeline.Pipeline) (caller, func()) {
		pipelineRuns.Add(1)
		return pipelines(b, p)
	}

	none, _ := strategyByName(noRetryName)
	defaults, _ := strategyByName(defaultsName)
	var mu sync.Mutex
	var heard, failed, unavailable int // the Pipeline's attempts, failed, with UNAVAILABLE
	opts := defaults.pipeline
	defaults.pipeline = func(sc *scenario, retry newRetry) []pipeline.Option {
		return append(opts(sc, retry), pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind != resilience.EventAttempt {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			heard++
			if e.Err != nil {
				failed++
				if status.Code(e.Err) == codes.Unavailable {
					unavailable++
				}
			}
		})))
	}
	strategies := []strategy{none, defaults}
	requests := 0
	for _, sc := range scenarios {
		var virtual []result
		synctest.Test(t, func(*testing.T) { virtual = runScenario(sc, strategies, 5) })
		remote := runScenarioWith(sc, strategies, 5, tr)
		require.Len(t, remote, 2)
		for i, r := range remote {
			assert.Equal(t, virtual[i].ok(), r.ok(), "%s, %s: calls ok", sc.name, r.strategy)
			assert.Equal(t, virtual[i].requests, r.requests, "%s, %s: backend requests, sent back", sc.name, r.strategy)
		}
		assert.Equal(t, 30, remote[0].requests, "%s: no retry, one request a call", sc.name)
		requests += remote[1].requests
		if sc.deadHost {
			assert.Less(t, remote[0].ok(), 30, "a third of the calls go to the dead host")
			assert.Greater(t, remote[1].requests, 30, "the Pipeline retried the refusals")
		}
	}
	assert.Equal(t, int64(len(scenarios)), attemptRuns.Load(), "no retry's rows, one RPC per attempt")
	assert.Equal(t, int64(len(scenarios)), pipelineRuns.Load(), "the Pipeline's rows through grpcclient")
	// The listener hears only the pipeline grpcclient runs (in virtual
	// time, the strategy's own build makes its pipeline).
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, requests, heard, "each attempt of the Pipeline a request of the remote backend")
	assert.Positive(t, failed)
	assert.Equal(t, failed, unavailable, "the failed attempts carry UNAVAILABLE, grpcclient's")
}
