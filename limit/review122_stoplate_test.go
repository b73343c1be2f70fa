package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Acquire calls the claimed extra's stop after its lock: the extra may have
// ended and its slot been handed to the heir meanwhile, and its attempt
// (a hedge that succeeded, and won its race) is then stopped after the
// fact: in a pipeline, a streamed winner's context canceled (review120).
func TestReview122StopAfterExtraReleased(t *testing.T) {
	late := 0
	const n = 20000
	for i := 0; i < n; i++ {
		l := NewFixed(4)
		ctx := context.Background()
		l.Acquire(ctx)
		var released atomic.Bool
		var stoppedLate atomic.Bool
		e, err := l.AcquireExtra(func() {
			if released.Load() {
				stoppedLate.Store(true)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		l.Acquire(ctx)
		l.Acquire(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			tk, err := l.Acquire(c)
			if err == nil {
				l.Release(tk, nil)
			}
		}()
		go func() {
			defer wg.Done()
			for l.Waiting() == 0 && l.InFlight() == 4 {
				// spin until the heir is queued
				if l.Waiting() > 0 {
					break
				}
			}
			l.Release(e, nil)
			released.Store(true)
		}()
		wg.Wait()
		if stoppedLate.Load() {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d: the extra's stop ran after its Release had handed its slot on", late, n)
	}
}
