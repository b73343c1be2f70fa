package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// The environment of a replica process: this test binary, run again.
const (
	envReplicaAddr = "BREAKERSTORE_REPLICA_ADDR"
	envReplicaName = "BREAKERSTORE_REPLICA_NAME"
	envGoroutines  = "BREAKERSTORE_REPLICA_GOROUTINES"
	envCalls       = "BREAKERSTORE_REPLICA_CALLS"
)

// TestReplicaProcess is not a test on its own: run by TestFleetOfProcesses
// as a separate OS process, it is one replica. It calls a dependency
// whose every tenth call of three fails through a breaker shared on the
// server, then prints how many calls it made and in how long.
func TestReplicaProcess(t *testing.T) {
	addr := os.Getenv(envReplicaAddr)
	if addr == "" {
		t.Skip("run as a replica by TestFleetOfProcesses")
	}
	goroutines, _ := strconv.Atoi(os.Getenv(envGoroutines))
	calls, _ := strconv.Atoi(os.Getenv(envCalls))
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	b := breaker.New(os.Getenv(envReplicaName), breaker.Shared(breakerstore.New(c, "proc:")),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.9, 100), breaker.Window(time.Minute, 6))
	start := time.Now()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				_ = b.Execute(context.Background(), func(context.Context) error {
					if (g*calls+i)%10 < 3 {
						return errors.New("down")
					}
					return nil
				})
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.NoError(t, b.Close())
	fmt.Printf("REPLICA %d %d\n", goroutines*calls, elapsed.Nanoseconds())
}

// runReplicas runs n replica processes at once and returns their calls
// per second, summed.
func runReplicas(t *testing.T, srv *redistest.Server, name string, n, goroutines, calls int) float64 {
	exe, err := os.Executable()
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perSecond float64
	for range n {
		wg.Go(func() {
			cmd := exec.Command(exe, "-test.run=^TestReplicaProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envReplicaAddr+"="+srv.Addr(), envReplicaName+"="+name,
				envGoroutines+"="+strconv.Itoa(goroutines), envCalls+"="+strconv.Itoa(calls))
			out, err := cmd.CombinedOutput()
			if !assert.NoError(t, err, "%s", out) {
				return
			}
			for _, line := range strings.Split(string(out), "\n") {
				var made, nanos float64
				if _, err := fmt.Sscanf(line, "REPLICA %f %f", &made, &nanos); err == nil {
					mu.Lock()
					perSecond += made / (nanos / 1e9)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return perSecond
}

// TestFleetOfProcesses: 3 replica processes x 16 goroutines x 1000 calls,
// 30% failing, share one breaker on a real redis-server: after their final
// flushes the fleet's totals are exactly the calls made. And the fleet's
// throughput with 3 processes x 32 goroutines is not held down by the
// sharing: no call waits on Redis.
func TestFleetOfProcesses(t *testing.T) {
	if os.Getenv(envReplicaAddr) != "" {
		t.Skip("a replica")
	}
	srv := redistest.Start(t)
	runReplicas(t, srv, "exact", 3, 16, 1000)
	r, f := fleetTotalsUnder(t, srv.Client(), "proc:{exact}")
	assert.EqualValues(t, 3*16*1000, r)
	assert.EqualValues(t, 3*16*300, f)

	one := runReplicas(t, srv, "one", 1, 32, 2000)
	three := runReplicas(t, srv, "three", 3, 32, 2000)
	t.Logf("calls per second, fleet-wide: %.0f with 1 replica process, %.0f with 3 (on %d cores)", one, three, runtimeCPUs())
	assert.Greater(t, three, 0.7*one, "three processes do not serialise on the shared state")
}

// fleetTotalsUnder sums the counts under one breaker's keys.
func fleetTotalsUnder(t *testing.T, c *redis.Client, prefix string) (requests, failures int64) {
	keys, err := c.Keys(context.Background(), prefix+":b:*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		v, err := c.HMGet(context.Background(), k, "r", "f").Result()
		require.NoError(t, err)
		r, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		f, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		requests += r
		failures += f
	}
	return requests, failures
}

func runtimeCPUs() int { return runtime.NumCPU() }
