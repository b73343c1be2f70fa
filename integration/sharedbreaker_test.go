package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestSharedBreakerThroughNetworkFaults puts toxiproxy between one
// replica and Redis: with latency of 2 s, data held forever, and
// connections reset, that replica's calls keep their speed (the p99 of a
// call stays within 1 ms of the run without a fault), none outlives its
// budget, sharing resumes within a second of the fault's end, and no
// goroutine is left.
func TestSharedBreakerThroughNetworkFaults(t *testing.T) {
	addr := os.Getenv(envToxiproxy)
	if addr == "" {
		t.Skipf("%s is not set: no toxiproxy server (.ci/run starts one)", envToxiproxy)
	}
	before := goleak.IgnoreCurrent()
	srv := redistest.Start(t)
	tp := toxiproxy.NewClient(addr)
	proxy, err := tp.CreateProxy(fmt.Sprintf("redis-%d", time.Now().UnixNano()), "127.0.0.1:0", srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Delete() })

	c := redis.NewClient(&redis.Options{Addr: proxy.Listen, ContextTimeoutEnabled: true, MaxRetries: -1})
	var mu sync.Mutex
	var events []string
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e.Kind.String())
	})
	b := breaker.New(fmt.Sprint("faults-", time.Now().UnixNano()), breaker.Shared(breakerstore.New(c, "it:")),
		breaker.FailureRate(0.5, 1000), breaker.Window(10*time.Second, 10), breaker.FlushInterval(100*time.Millisecond),
		breaker.WithListener(rec))
	const budget = 50 * time.Millisecond
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(budget))
	op := func(ctx context.Context) (int, error) { return 1, nil }

	// p99 of n calls over about 600 ms, and the slowest.
	measure := func() (p99, worst time.Duration) {
		var ds []time.Duration
		for start := time.Now(); time.Since(start) < 600*time.Millisecond; {
			t0 := time.Now()
			_, err := pipeline.Do(context.Background(), p, op)
			ds = append(ds, time.Since(t0))
			require.NoError(t, err)
			time.Sleep(100 * time.Microsecond)
		}
		slices.Sort(ds)
		return ds[len(ds)*99/100], ds[len(ds)-1]
	}
	restored := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range events {
			if e == "shared_state_restored" {
				n++
			}
		}
		return n
	}
	base, _ := measure()
	for _, fault := range []struct {
		name  string
		toxic string
		attrs toxiproxy.Attributes
	}{
		{"latency 2 s", "latency", toxiproxy.Attributes{"latency": 2000}},
		{"data held forever", "timeout", toxiproxy.Attributes{"timeout": 0}},
		{"connections reset", "reset_peer", toxiproxy.Attributes{"timeout": 0}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			before := restored()
			_, err := proxy.AddToxic(fault.toxic, fault.toxic, "downstream", 1, fault.attrs)
			require.NoError(t, err)
			p99, worst := measure()
			require.NoError(t, proxy.RemoveToxic(fault.toxic))
			healed := time.Now()
			t.Logf("p99 %v (no fault: %v), slowest %v", p99, base, worst)
			assert.Less(t, p99, base+time.Millisecond, "calls keep their speed")
			assert.Less(t, worst, budget, "no call outlives its budget")
			require.Eventually(t, func() bool { return restored() > before }, 3*time.Second, 10*time.Millisecond, "sharing resumes")
			assert.Less(t, time.Since(healed), time.Second+200*time.Millisecond)
		})
	}
	require.NoError(t, b.Close())
	require.NoError(t, c.Close())
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the toxiproxy client's
	goleak.VerifyNone(t, before)
}
