package dashboard_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// A breaker forced closed, whose calls fail fast one after another: the
// snapshot read requests, then failures, and took the difference for
// the successes: a call that started and failed between the two reads
// made it wrap around (4294967295 successes shown).
func TestReview98ForcedClosedSuccessesWrap(t *testing.T) {
	b := breaker.New("wrap")
	_ = b.SetMode(context.Background(), breaker.ForcedClosed, "alice")
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	bad := 0
	n := 0
	var worst breaker.Snapshot
	for time.Now().Before(deadline) {
		s := b.Snapshot()
		n++
		done := s.Counts.TotalSuccesses + s.Counts.TotalFailures
		if s.Counts.TotalSuccesses > s.Counts.Requests || done > 0 && s.FailureRate < 0.5 {
			bad++
			worst = s
		}
	}
	stop.Store(true)
	<-done
	if bad > 0 {
		t.Errorf("every call failed; %d of %d snapshots show more successes than requests, or a failure rate under 0.5, e.g. %+v (rate %v)", bad, n, worst.Counts, worst.FailureRate)
	}
}
