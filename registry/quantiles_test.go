package registry

import (
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The quantiles are nearest-rank: of 100 durations 1..100 ns, p50 is the
// 50th and p99 the 99th, not the largest.
func TestQuantilesAreNearestRank(t *testing.T) {
	s := newStats()
	for i := 100; i >= 1; i-- {
		s.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Duration(i)})
	}
	if p50, p99 := s.quantiles(); p50 != 50 || p99 != 99 {
		t.Errorf("of 1..100: p50 = %v, p99 = %v; want 50ns, 99ns", p50, p99)
	}
	one := newStats()
	one.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: 7})
	if p50, p99 := one.quantiles(); p50 != 7 || p99 != 7 {
		t.Errorf("of one: p50 = %v, p99 = %v", p50, p99)
	}
}
