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
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	return strategy{name + " (grpc-go itself)", func(*scenario) caller {
		return func(ctx context.Context, c *call) error { _, err := c.attempt(ctx); return err }
	}}
}

// TestRealTimeGRPC is the real-time mode over gRPC: grpc-go's retry
// policy, with and without its throttling, through real channels over TCP
// on 127.0.0.1, on the machine's clock, each against a backend of its own;
// a run that fell behind is not reported. It runs when STORM_REALTIME_GRPC
// names the scenarios (comma-separated), STORM_REALTIME_RUNS times each (1
// by default), then compares the runs with each other and with the model
// of grpc-go in virtual time (the rows of the tables):
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
		synctest.Test(t, func(*testing.T) { virtual = runScenario(sc, grpcModels(), 1) })
		var out strings.Builder
		reported := make([][]result, runs)
		for n := range runs {
			results := realTimeGRPC(sc)
			fmt.Fprintf(&out, "\nRun %d of %d. ", n+1, runs)
			if late, lag := behind(results); late {
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
// through sc over TCP on 127.0.0.1, in real time, both at once.
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
	return results
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
	r := runScenarioWith(healthy, []strategy{s}, 1, grpcPlain)
	assert.Equal(t, 30, r[0].ok())
	assert.Equal(t, 30, r[0].requests)
}
