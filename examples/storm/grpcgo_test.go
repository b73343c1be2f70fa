package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// rawCodec passes bytes as they are, so that the test needs no generated
// code.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "storm-raw" }

// grpcGoServiceConfig is the service config grpcRetry models.
func grpcGoServiceConfig(throttled bool) string {
	c := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "storm.Backend"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": %d,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]`, grpcMaxAttempts, grpcMultiplier)
	if throttled {
		c += fmt.Sprintf(`, "retryThrottling": {"maxTokens": %d, "tokenRatio": %v}`, grpcMaxTokens, grpcTokenRatio)
	}
	return c + "}"
}

// grpcGoTransport is grpc-go itself: each backend behind a gRPC server, in
// memory (bufconn) or over TCP on 127.0.0.1, called through a channel with
// the service config that grpcRetry models. The attempt's number comes from the
// grpc-previous-rpc-attempts header grpc-go sends on a retry.
func grpcGoTransport(throttled, overTCP bool) transport {
	return func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		var lis net.Listener = bufconn.Listen(1 << 20)
		dial := func(ctx context.Context, _ string) (net.Conn, error) { return lis.(*bufconn.Listener).DialContext(ctx) }
		if overTCP {
			var err error
			if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				panic(err)
			}
			dial = func(ctx context.Context, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", lis.Addr().String())
			}
		}
		srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var in []byte
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(stream.Context())
			id, _ := strconv.ParseUint(first(md, "storm-call"), 10, 64)
			seed, _ := strconv.ParseUint(first(md, "storm-seed"), 10, 64)
			prev, _ := strconv.ParseUint(first(md, "grpc-previous-rpc-attempts"), 10, 64)
			c := &call{id: id, seed: seed}
			if err := b.serve(stream.Context(), c.rand(streamBackend, prev+1)); err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			out := []byte("ok")
			return stream.SendMsg(&out)
		}))
		go func() { _ = srv.Serve(lis) }()
		cc, err := grpc.NewClient("passthrough:///storm",
			grpc.WithContextDialer(dial),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(grpcGoServiceConfig(throttled)))
		if err != nil {
			panic(err)
		}
		send := func(ctx context.Context, c *call, _ uint64) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "storm-call", strconv.FormatUint(c.id, 10), "storm-seed", strconv.FormatUint(c.seed, 10))
			in, out := []byte("call"), []byte(nil)
			return cc.Invoke(ctx, "/storm.Backend/Call", &in, &out, grpc.ForceCodec(rawCodec{}))
		}
		return send, func() {
			cc.Close()
			srv.Stop()
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return "0"
}

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
