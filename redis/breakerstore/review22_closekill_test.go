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

// The reverse: the fleet's probe succeeds and it closes; Redis is killed
// and restarted empty 0 to 20 ms after a replica heard the close: the
// fleet must come back closed (the dependency is healthy), not open.
func TestReview22KilledJustAfterTheClose(t *testing.T) {
	srv := startReview22Redis(t)
	bad := 0
	const runs = 10
	for run := range runs {
		bs := srv.fleet("rv22-close-", 300*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		boom := errors.New("down")
		for range 6 {
			_ = bs[0].Execute(context.Background(), func(context.Context) error { return boom })
		}
		deadline := time.Now().Add(3 * time.Second)
		for bs[1].FleetState() == resilience.StateClosed {
			require.True(t, time.Now().Before(deadline), "the fleet did not open")
			time.Sleep(time.Millisecond)
		}
		// The dependency is back: replica 1 calls until its probe closes the fleet.
		for bs[1].FleetState() != resilience.StateClosed {
			require.True(t, time.Now().Before(deadline), "the fleet did not close")
			_ = bs[1].Execute(context.Background(), func(context.Context) error { return nil })
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(run%5) * 5 * time.Millisecond)
		srv.restart()
		time.Sleep(400 * time.Millisecond)
		st, err := bs[1].Fleet(context.Background())
		require.NoError(t, err)
		if st.State != resilience.StateClosed {
			bad++
			t.Logf("run %d: store %v, views %v %v %v", run, st.State, bs[0].FleetState(), bs[1].FleetState(), bs[2].FleetState())
		}
		for _, b := range bs {
			_ = b.Close()
		}
	}
	assert.Zero(t, bad, "of %d runs, the fleet came back open on a healthy dependency", runs)
}
