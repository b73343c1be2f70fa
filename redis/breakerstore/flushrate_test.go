package breakerstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestFleetFlushRateWhileCycling: the dependency keeps failing, so the
// fleet goes round open -> half-open -> a probe fails -> open, with an
// open timeout shorter than a flush interval (20 ms): neither the moment
// it turns half-open nor the end of each probe makes an extra flush. The script calls fleet-wide are at most replicas /
// flush interval, plus 10%.
func TestFleetFlushRateWhileCycling(t *testing.T) {
	skipUnlessProcesses(t)
	for _, open := range []time.Duration{20 * time.Millisecond} {
		t.Run(open.String(), func(t *testing.T) {
			tp := serverTopology(t)
			dep, _, w, rs := startFleet(t, tp, func(_ int, cfg *replicaConfig) {
				cfg.PauseUS = 200 // busy
				cfg.OpenMS = int(open / time.Millisecond)
			})
			time.Sleep(200 * time.Millisecond)
			dep.down.Store(true)
			start := time.Now()
			_, ok := w.next(resilience.StateOpen, start, 3*time.Second)
			require.True(t, ok, "the fleet opened")
			time.Sleep(2 * fleetFlush)
			before := tp.scripts(t)
			time.Sleep(1500 * time.Millisecond)
			after := tp.scripts(t)
			n := after[0].n - before[0].n
			took := after[0].at.Sub(before[0].at)
			probes := dep.probes.Load()
			for _, r := range rs {
				r.quit()
			}
			perSecond := float64(n) / took.Seconds()
			t.Logf("open timeout %v, the fleet cycling: %d script calls in %v, %.1f/s fleet-wide (nominal %.0f), %d probe(s)",
				open, n, took.Round(time.Millisecond), perSecond, 3/fleetFlush.Seconds(), probes)
			assert.LessOrEqual(t, perSecond, 1.1*3/fleetFlush.Seconds())
		})
	}
}
