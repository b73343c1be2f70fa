package breaker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// NextProbe, which Wait and its queue's timer wait for, is on the
// monotonic clock, as the core's open timeout is: a wall clock stepped
// back while the breaker is open (NTP, a VM resumed) made Wait reject at
// once, or wait for as long as the step, with the core half-open long
// before; one stepped forward made the queue's timer tick every
// nanosecond until the open timeout ended (review90).
func TestNextProbeIsOnTheMonotonicClock(t *testing.T) {
	b := New("wall", OpenTimeout(50*time.Millisecond))
	for range 5 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
	}
	opened := monotime.Now()
	next := b.NextProbe()
	if !strings.Contains(next.String(), " m=") {
		t.Fatalf("NextProbe %v has no monotonic reading", next)
	}
	if at := monotime.Reading(b.wait.openedAt.Load()); at > opened || opened-at > monotime.Reading(time.Second) {
		t.Fatalf("the wait queue's opening reading %d is not the monotonic clock's (%d)", at, opened)
	}
	if left := time.Until(next); left <= 0 || left > 50*time.Millisecond {
		t.Fatalf("NextProbe in %v, want within the open timeout", left)
	}
}
