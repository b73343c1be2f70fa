package grpcclient_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// outage is the result of one outage run.
type outage struct {
	offered, load int           // calls started, and attempts the backend got, while it was down
	failed        int           // calls that failed
	p99           time.Duration // of the failed calls' latencies
}

// runOutage offers rate calls a second to a backend that answers
// UNAVAILABLE for down, through a connection made with opts, and measures
// what the backend got meanwhile and how long the failed calls took.
func runOutage(t *testing.T, rate int, down time.Duration, opts ...grpc.DialOption) outage {
	srv := start(t)
	cc, err := grpctest.Dial(srv.Addr, opts...)
	require.NoError(t, err)
	defer cc.Close()
	client := grpctest.NewClient(cc)
	_, err = client.Get(t.Context(), "warm up")
	require.NoError(t, err)
	srv.Reset()

	var mu sync.Mutex
	var failed []time.Duration
	var wg sync.WaitGroup
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	offered := 0
	for end := time.Now().Add(down); time.Now().Before(end); <-tick.C {
		offered++
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if _, err := client.Get(ctx, "x"); err != nil {
				mu.Lock()
				failed = append(failed, time.Since(start))
				mu.Unlock()
			}
		})
	}
	load := srv.Count(grpctest.Get)
	srv.SetFault(grpctest.Get, grpctest.Fault{})
	wg.Wait()
	slices.Sort(failed)
	o := outage{offered: offered, load: load, failed: len(failed)}
	if len(failed) > 0 {
		o.p99 = failed[min(len(failed)-1, len(failed)*99/100)]
	}
	return o
}

// builtinThrottled is builtinRetry with grpc-go's retry throttling.
const builtinThrottled = `{"methodConfig": [{"name": [{"service": "resiliencekit.grpctest.Echo"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`

// TestOutageComparison runs the same outage (a backend answering
// UNAVAILABLE for 1.5 s to 200 calls a second) with grpc-go's built-in
// retry policy and with the Pipeline, and prints the backend's load and
// the p99 latency of the failed calls side by side (docs/grpc.md).
func TestOutageComparison(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an outage of 1.5 s per strategy")
	}
	const rate, down = 200, 1500 * time.Millisecond
	retry := retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(100*time.Millisecond), retrypolicy.MaxDelay(time.Second))
	pipelineDial := func(p *pipeline.Pipeline) []grpc.DialOption {
		return grpcclient.New(grpcclient.WithPipeline(p)).DialOptions()
	}
	rows := []struct {
		name string
		opts []grpc.DialOption
	}{
		{"grpc-go built-in retry (4 attempts, 0.1 s backoff ×2, 1 s max)", []grpc.DialOption{grpc.WithDefaultServiceConfig(builtinRetry)}},
		{"grpc-go built-in retry + retryThrottling (10 tokens, ratio 0.1)", []grpc.DialOption{grpc.WithDefaultServiceConfig(builtinThrottled)}},
		{"Pipeline: the same retry (4 attempts, 100 ms base, full jitter)", pipelineDial(pipeline.New(pipeline.WithRetry(retry)))},
		{"Pipeline: retry + quota (10%) + breaker (5 failures, 1 s open)", pipelineDial(pipeline.New(
			pipeline.WithRetry(retry.With(retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 1, 10*time.Second)))),
			pipeline.WithBreaker(breaker.New("backend", breaker.OpenTimeout(time.Second)))))},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| strategy | backend load during the outage (× offered) | p99 latency of failed calls |\n| --- | ---: | ---: |\n")
	results := make([]outage, len(rows))
	for i, row := range rows {
		o := runOutage(t, rate, down, row.opts...)
		results[i] = o
		fmt.Fprintf(&table, "| %s | %.2f (%d of %d) | %v |\n", row.name, float64(o.load)/float64(o.offered), o.load, o.offered, o.p99.Round(100*time.Microsecond))
	}
	t.Log(table.String())
	assert.Greater(t, results[0].load, 2*results[0].offered, "built-in retry multiplies the load")
	assert.Less(t, results[3].load, results[0].load/4, "the pipeline's quota and breaker keep it near nothing")
	assert.Less(t, results[3].p99, results[0].p99, "and fail fast")
}
