package breaker_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestPanicsNeverOpenTheFleet: calls whose op panics or calls
// runtime.Goexit, on two replicas of a shared breaker, are the caller's
// bug: the fleet's window counts none of them, it stays closed through
// many flushes, and a healthy call then goes through on both replicas.
func TestPanicsNeverOpenTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore()
		var bs []*breaker.Breaker
		for range 2 {
			b := breaker.New("buggy", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
				breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(3))
			defer b.Close()
			bs = append(bs, b)
		}
		for range 10 {
			var wg sync.WaitGroup
			for _, b := range bs {
				for i := range 10 {
					wg.Go(func() {
						defer func() { _ = recover() }()
						_ = b.Execute(context.Background(), func(context.Context) error {
							if i%2 == 0 {
								runtime.Goexit()
							}
							panic("the caller's bug")
						})
					})
				}
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		s, _ := st.state("buggy")
		assert.Equal(t, resilience.StateClosed, s, "the fleet")
		for _, b := range bs {
			assert.Equal(t, resilience.StateClosed, b.State())
			assert.Equal(t, resilience.StateClosed, b.FleetState())
			require.NoError(t, b.Execute(context.Background(), func(context.Context) error { return nil }))
		}
	})
}
