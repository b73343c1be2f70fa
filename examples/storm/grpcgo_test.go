package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestGRPCModelMatchesGRPCGo runs grpc-go's own retry policy, with and
// without its retry throttling, through five of the scenarios, and
// compares calls ok and backend requests with those of the model the
// tables use (grpcRetry): within 2% (grpc-go draws its jitter from math/rand, so its runs differ by a few calls).
func TestGRPCModelMatchesGRPCGo(t *testing.T) {
	if raceEnabled {
		t.Skip("minutes under the race detector")
	}
	for _, key := range []string{"outage", "brownout", "metastable", "deadhost", "slowrecovery"} {
		for _, throttled := range []bool{false, true} {
			sc := scenarioByKey(key)
			model := grpcName
			if throttled {
				model = grpcThrottled
			}
			t.Run(fmt.Sprintf("%s/%s", key, model), func(t *testing.T) {
				s, _ := strategyByName(model)
				one := grpcGoItself(model)
				var real, modelled []result
				synctest.Test(t, func(t *testing.T) {
					real = runScenarioWith(sc, []strategy{one}, 1, grpcGoTransport(throttled, false))
					modelled = runScenario(sc, []strategy{s}, 1)
				})
				require.Len(t, real, 1)
				t.Logf("grpc-go: %d ok, %.2f requests/call; model: %d ok, %.2f", real[0].ok(), real[0].perCall(), modelled[0].ok(), modelled[0].perCall())
				assert.InEpsilon(t, modelled[0].ok(), real[0].ok(), 0.02)
				assert.InEpsilon(t, modelled[0].perCall(), real[0].perCall(), 0.02)
			})
		}
	}
}

// grpcGoItself is the strategy that calls once, through the channel: the
// retries are grpc-go's.
func grpcGoItself(name string) strategy {
	return strategy{name: name + " (grpc-go itself)", build: func(*scenario) caller {
		return func(ctx context.Context, c *call) error { _, err := c.attempt(ctx); return err }
	}}
}

// TestRealTimeGRPC is the real-time mode over gRPC: grpc-go's retry
// policy, with and without its throttling, through real channels over TCP
// on 127.0.0.1, then the Pipeline with its defaults and as recommended,
// through grpcclient's interceptor (the -grpc transport), on the machine's
// clock, each against a backend of its own; a run that fell behind is not
// reported. It runs when STORM_REALTIME_GRPC names the scenarios
// (comma-separated), STORM_REALTIME_RUNS times each (1 by default), then
// compares the runs with each other and with the rows of the tables in
// virtual time (for grpc-go, its model's):
//
//	STORM_REALTIME_GRPC=outage STORM_REALTIME_RUNS=3 go test ./examples/storm -run TestRealTimeGRPC -v
func TestRealTimeGRPC(t *testing.T) {
	keys := os.Getenv("STORM_REALTIME_GRPC")
	if keys == "" {
		t.Skip("the real-time gRPC mode: STORM_REALTIME_GRPC=outage go test ./examples/storm -run TestRealTimeGRPC -v")
	}
	runs := 1
	if v := os.Getenv("STORM_REALTIME_RUNS"); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "STORM_REALTIME_RUNS")
		require.Positive(t, runs, "STORM_REALTIME_RUNS")
	}
	for _, key := range strings.Split(keys, ",") {
		sc := scenarioByKey(key)
		require.NotNil(t, sc, "no scenario %q", key)
		var virtual []result
		synctest.Test(t, func(*testing.T) { virtual = runScenario(sc, append(grpcModels(), grpcPipelines()...), 1) })
		var out strings.Builder
		reported := make([][]result, runs)
		for n := range runs {
			results := realTimeGRPC(sc)
			fmt.Fprintf(&out, "\nRun %d of %d. ", n+1, runs)
			if late, lag := behind(results, 0); late {
				fmt.Fprint(&out, fellBehind(sc, lag))
				continue
			} else {
				printScenario(&out, sc, results)
				fmt.Fprintf(&out, "(lag: %s)\n", lag)
			}
			reported[n] = results
		}
		fmt.Fprintln(&out)
		printComparison(&out, sc, runs, compare(reported, virtual))
		t.Log("\n" + out.String())
	}
}

// realTimeGRPC runs grpc-go itself, with and without its throttling,
// through sc over TCP on 127.0.0.1, in real time, both at once; then the
// Pipeline's two rows through grpcclient, both at once.
func realTimeGRPC(sc *scenario) []result {
	var results []result
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, throttled := range []bool{false, true} {
		name := grpcName
		if throttled {
			name = grpcThrottled
		}
		wg.Go(func() {
			r := runScenarioWith(sc, []strategy{grpcGoItself(name)}, 1, grpcGoTransport(throttled, true))
			mu.Lock()
			defer mu.Unlock()
			results = append(results, r...)
		})
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return strings.Compare(a.strategy, b.strategy) })
	return append(results, runScenarioWith(sc, grpcPipelines(), 1, grpcStorm)...)
}

// grpcPipelines are the Pipeline's rows that TestRealTimeGRPC runs.
func grpcPipelines() []strategy {
	d, _ := strategyByName(defaultsName)
	r, _ := strategyByName(recommendedName)
	return []strategy{d, r}
}

// grpcModels are the model's strategies, named as grpc-go itself is in
// realTimeGRPC, so that the comparison pairs them.
func grpcModels() []strategy {
	var out []strategy
	for _, name := range []string{grpcName, grpcThrottled} {
		s, _ := strategyByName(name)
		s.name = grpcGoItself(name).name
		out = append(out, s)
	}
	return out
}

// TestGRPCPlainKeepsTheDraws: over -grpc, each attempt of a strategy's own
// is one RPC that meets the fate it meets in process (the storm-attempt
// header numbers it), fails with the error it does in process, and the
// backend counts it; a real run of the default pipeline over it gets
// every call of a healthy backend through with one request each.
func TestGRPCPlainKeepsTheDraws(t *testing.T) {
	sc := &scenario{hosts: 3, workers: 2, queue: 10, service: func(*rand.Rand) time.Duration { return time.Millisecond }, deadHost: true}
	local := newBackend(sc, time.Now())
	defer local.close()
	remote := newBackend(sc, time.Now())
	defer remote.close()
	send, stop := grpcPlain(remote)
	defer stop()
	for id := range uint64(30) {
		for n := uint64(1); n <= 2; n++ {
			want := local.serve(context.Background(), (&call{id: id, seed: 5}).rand(streamBackend, n))
			got := send(context.Background(), &call{id: id, seed: 5}, n)
			assert.Equal(t, errors.Is(want, errRefused), errors.Is(got, errRefused), "call %d attempt %d: %v, %v", id, n, want, got)
			assert.Equal(t, want == nil, got == nil, "call %d attempt %d", id, n)
		}
	}
	assert.Equal(t, int64(60), int64(sum(remote.requests.counts(), 0, time.Minute)))

	healthy := &scenario{key: "healthy", name: "Healthy", rate: 100, until: 300 * time.Millisecond, hosts: 1, workers: 4,
		queue: 50, service: uniformService, healthy: []span{{0, forever}}, deadline: time.Second}
	s, _ := strategyByName(defaultsName)
	r := runScenarioWith(healthy, []strategy{s}, 1, transport{attempts: grpcPlain})
	assert.Equal(t, 30, r[0].ok())
	assert.Equal(t, 30, r[0].requests)
}

// TestGRPCPipelinesGoThroughGRPCClient: over -grpc, the rows of the
// Pipeline are calls through grpcclient's interceptor, not attempts of
// the harness's own. Every strategy of the Pipeline says its options, and
// no other does; the -grpc transport runs such a strategy without its
// transport of attempts; the attempts' errors that the pipeline hears
// carry a gRPC status, UNAVAILABLE, which only grpcclient's classification
// gives them (an attempt of the harness's own fails with errUnavailable,
// as in process); and the interceptor's retries meet the fates they meet
// in process: the same calls ok, the same backend requests.
func TestGRPCPipelinesGoThroughGRPCClient(t *testing.T) {
	for _, s := range slices.Concat(strategies, extraStrategies, []strategy{waitStrategy}) {
		assert.Equal(t, s.name == plainName || strings.HasPrefix(s.name, "pipeline"), s.pipeline != nil, s.name)
	}

	tr, stop, err := realtimeTransport(options{grpc: true})
	require.NoError(t, err)
	defer stop()
	var attempts atomic.Int64
	send := tr.attempts
	tr.attempts = func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		attempts.Add(1)
		return send(b)
	}
	var mu sync.Mutex
	codes := map[string]int{} // the attempts' failures, by status code
	heard := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventAttempt && e.Err != nil {
			mu.Lock()
			defer mu.Unlock()
			codes[status.Code(e.Err).String()]++
		}
	})
	s, _ := strategyByName(plainName)
	opts := s.pipeline
	s.pipeline = func(sc *scenario, retry newRetry) []pipeline.Option {
		return append(opts(sc, retry), pipeline.WithListener(heard))
	}
	sc := &scenario{key: "brownout", name: "Brownout", rate: 100, until: 300 * time.Millisecond, hosts: 1, workers: 4,
		queue: 50, service: uniformService, errRate: func(time.Duration) float64 { return 0.3 },
		deadline: time.Second, attemptTimeout: attemptTimeout}
	r := runScenarioWith(sc, []strategy{s}, 1, tr)
	var model []result
	synctest.Test(t, func(*testing.T) { model = runScenario(sc, []strategy{s}, 1) })

	assert.Zero(t, attempts.Load(), "the transport of attempts was used")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, r[0].requests-r[0].ok(), codes["Unavailable"], "attempts failed with UNAVAILABLE, of %v", codes)
	assert.Len(t, codes, 1, "only UNAVAILABLE: %v", codes)
	assert.Equal(t, model[0].ok(), r[0].ok(), "calls ok")
	assert.Equal(t, model[0].requests, r[0].requests, "backend requests")
	assert.Greater(t, r[0].requests, 35, "the brownout's 503s were retried")
}
