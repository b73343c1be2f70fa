package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Over -grpc, through grpcclient: each attempt (retry or hedge) of a call
// reaches the server as a request of its own, counted by the backend, and
// the server numbers it 1, 2, 3... from grpc-previous-rpc-attempts, so
// that it draws the fate the same attempt draws in process. Checked by the
// draws themselves: each request's service draw is fingerprinted and
// matched to the (call, attempt) whose source gives it.
func TestReview5GRPCPipelineAttemptsNumberedAndCounted(t *testing.T) {
	const seed, calls = 7, 20
	for _, tc := range []struct {
		name     string
		down     bool
		p        func() *pipeline.Pipeline
		attempts int // per call
	}{
		{"retries of a backend down", true, func() *pipeline.Pipeline {
			return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
		}, 4},
		{"a hedge of a slow backend", false, func() *pipeline.Pipeline {
			return pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(1), hedge.MaxShare(1))))
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[uint64]int{}
			sc := &scenario{key: "review5", rate: 1, until: time.Second, hosts: 1, workers: 4, queue: 100,
				service: func(r *rand.Rand) time.Duration {
					mu.Lock()
					seen[r.Uint64()]++
					mu.Unlock()
					return 100 * time.Millisecond
				}}
			if tc.down {
				sc.down = func(time.Duration) bool { return true }
			}
			b := newBackend(sc, time.Now())
			do, stop := grpcPipeline(b, tc.p())
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_ = do(ctx, &call{id: uint64(i), seed: seed, b: b})
				})
			}
			wg.Wait()
			// A hedge that lost may reach the server after its call
			// returned: wait for every draw before counting.
			drawn := func() (n int) {
				mu.Lock()
				defer mu.Unlock()
				for _, k := range seen {
					n += k
				}
				return n
			}
			for end := time.Now().Add(5 * time.Second); drawn() < calls*tc.attempts && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			stop()
			b.close()
			mu.Lock()
			defer mu.Unlock()
			requests := sum(b.requests.counts(), 0, time.Hour)
			if requests != calls*tc.attempts {
				t.Errorf("backend requests %d, want %d", requests, calls*tc.attempts)
			}
			for i := range calls {
				for n := 1; n <= tc.attempts; n++ {
					r := (&call{id: uint64(i), seed: seed}).rand(streamBackend, uint64(n))
					r.IntN(1)
					r.Float64()
					if fp := r.Uint64(); seen[fp] != 1 {
						t.Errorf("call %d attempt %d: drawn %d times by the server", i, n, seen[fp])
					}
				}
			}
		})
	}
}
