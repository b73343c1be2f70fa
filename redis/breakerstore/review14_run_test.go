package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errDep = errors.New("dependency down")

func review14Policy() breaker.FleetPolicy {
	return breaker.FleetPolicy{Rate: 0.5, MinRequests: 20, Window: 10 * time.Second, Buckets: 10, OpenTimeout: time.Minute, HalfOpenRequests: 1, ProbeTimeout: time.Minute, FlushInterval: flush}
}

func review14Opts() []breaker.Option {
	return []breaker.Option{breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 20), breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Minute)}
}

// hammer makes failing calls on each replica every 10 ms until stop.
func hammer(bs []*breaker.Breaker, stop chan struct{}) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, b := range bs {
				_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
			}
		}
	}()
	return done
}

// A real outage across a restart of Redis (empty, or from its AOF) still
// opens the fleet, soon after the restart.
func TestReview14OutageAcrossRestartOpens(t *testing.T) {
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprint("aof=", aof), func(t *testing.T) {
			var args []string
			if aof {
				args = []string{"--appendonly", "yes", "--appendfsync", "always"}
			}
			srv := redistest.Start(t, args...)
			bs := replicas(t, srv, 3, review14Opts()...)
			direct := breakerstore.New(srv.Client(), "test:")
			stop := make(chan struct{})
			// a few failures before the restart, not enough to open
			for range 3 {
				for _, b := range bs {
					_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
				}
			}
			time.Sleep(2 * flush)
			srv.Kill()
			time.Sleep(300 * time.Millisecond)
			srv.Restart()
			restarted := time.Now()
			done := hammer(bs, stop)
			defer func() { close(stop); <-done }()
			require.Eventually(t, func() bool {
				st, err := direct.Read(context.Background(), bs[0].Name(), review14Policy())
				return err == nil && st.State == resilience.StateOpen
			}, 5*time.Second, 10*time.Millisecond, "the fleet opens on a real outage after a restart")
			t.Logf("opened %v after the restart", time.Since(restarted))
		})
	}
}

// INFO renamed away: sharing still works (no clearing), and an outage
// opens the fleet.
func TestReview14InfoRenamedStillShares(t *testing.T) {
	srv := redistest.Start(t, "--rename-command", "INFO", "")
	_, err := srv.Client().Do(context.Background(), "INFO", "server").Result()
	require.Error(t, err, "INFO is disabled")
	t.Logf("INFO: %v", err)
	bs := replicas(t, srv, 3, review14Opts()...)
	direct := breakerstore.New(srv.Client(), "test:")
	stop := make(chan struct{})
	done := hammer(bs, stop)
	defer func() { close(stop); <-done }()
	require.Eventually(t, func() bool {
		st, err := direct.Read(context.Background(), bs[0].Name(), review14Policy())
		return err == nil && st.State == resilience.StateOpen
	}, 5*time.Second, 10*time.Millisecond)
	for _, b := range bs {
		require.Eventually(t, func() bool { return b.State() == resilience.StateOpen }, time.Second, 10*time.Millisecond)
	}
	n, err := srv.Client().Exists(context.Background(), "test:{"+bs[0].Name()+"}:run").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no :run key without INFO")
}

// On a Redis Cluster, the script's INFO runs on the slot's master: the
// :run key is kept beside the others, and a fleet opens on an outage.
func TestReview14ClusterRunKey(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cl.WaitOK(t, 5*time.Second)
	c := cl.Client()
	s := breakerstore.New(c, "test:")
	name := "cl-" + time.Now().Format("150405.000")
	var bs []*breaker.Breaker
	for range 3 {
		b := breaker.New(name, append([]breaker.Option{breaker.Shared(s), breaker.FlushInterval(flush)}, review14Opts()...)...)
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	stop := make(chan struct{})
	done := hammer(bs, stop)
	defer func() { close(stop); <-done }()
	require.Eventually(t, func() bool {
		st, err := s.Read(context.Background(), name, review14Policy())
		return err == nil && st.State == resilience.StateOpen
	}, 5*time.Second, 10*time.Millisecond)
	run, err := c.Get(context.Background(), "test:{"+name+"}:run").Result()
	require.NoError(t, err)
	id, _ := cl.MasterOf("test:{"+name+"}").Client().Info(context.Background(), "server").Result()
	assert.Contains(t, id, "run_id:"+run)
}
