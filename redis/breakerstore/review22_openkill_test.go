package breakerstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The fix's promise under its own fault: the fleet opens, and Redis is
// killed (SIGKILL) and restarted empty at once, at delays from 0 to 20 ms
// after the opening, while three replicas flush every 20 ms and one keeps
// failing: the fleet must come back open (the latest view), not closed,
// and stay so until its open timeout.
func TestReview22KilledJustAfterTheOpening(t *testing.T) {
	srv := startReview22Redis(t)
	bad := 0
	const runs = 12
	for run := range runs {
		bs := srv.fleet("rv22-kill-", 2*time.Second)
		time.Sleep(100 * time.Millisecond)
		boom := errors.New("down")
		for range 6 {
			_ = bs[0].Execute(context.Background(), func(context.Context) error { return boom })
		}
		// Kill as soon as any replica hears the opening, plus a delay.
		deadline := time.Now().Add(2 * time.Second)
		for bs[1].FleetState() == resilience.StateClosed && bs[2].FleetState() == resilience.StateClosed {
			require.True(t, time.Now().Before(deadline), "the fleet did not open")
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Duration(run%5) * 5 * time.Millisecond)
		srv.restart()
		time.Sleep(400 * time.Millisecond)
		st, err := bs[1].Fleet(context.Background())
		require.NoError(t, err)
		views := []resilience.State{bs[0].FleetState(), bs[1].FleetState(), bs[2].FleetState()}
		if st.State != resilience.StateOpen {
			bad++
			t.Logf("run %d (killed %d ms after the opening was heard): store %v, views %v", run, run%5*5, st.State, views)
		}
		for _, b := range bs {
			_ = b.Close()
		}
	}
	assert.Zero(t, bad, "of %d runs, the fleet came back closed on a dead dependency", runs)
}
