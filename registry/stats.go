package registry

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// SampleEvery is how often, one call in so many, the registry's listener
// times a call for the latency quantiles: it wants the
// [resilience.EventCallDone] of one call in SampleEvery only, so that the
// others pay for no clock read.
const SampleEvery = tally.SampleEvery

// latencies is how many of the latest timed calls the quantiles are of.
const latencies = 512

// stats is the listener the registry adds to a pipeline: counters and a
// ring of sampled durations, all atomics, no lock, no allocation. It keeps
// tally.Counts, which the pipeline adds each attempt to, by whether it was
// a call's first and whether it succeeded, without an event: the success
// path costs one atomic addition.
type stats struct {
	tally.Counts
	retries, hedged, rejected, throttled atomic.Uint64
	limited, waited                      atomic.Uint64
	ring                                 [latencies]atomic.Int64
	ringN                                atomic.Uint64
}

func newStats() *stats { return &stats{} }

// Wants asks for the events the figures are made of. Attempts are
// counted in the Counts, and the duration of one call in SampleEvery is
// asked for by them.
func (s *stats) Wants(k resilience.EventKind) bool {
	switch k {
	case resilience.EventRetry, resilience.EventHedged, resilience.EventRejected,
		resilience.EventThrottled, resilience.EventLimited, resilience.EventWaitOpen:
		return true
	}
	return false
}

// OnEvent counts e.
func (s *stats) OnEvent(e resilience.Event) {
	switch e.Kind {
	case resilience.EventRetry:
		s.retries.Add(1)
	case resilience.EventHedged:
		s.hedged.Add(1)
	case resilience.EventRejected:
		if e.Attempt == 0 { // a call the breaker refused; not a stop between retries
			s.rejected.Add(1)
		}
	case resilience.EventThrottled:
		s.throttled.Add(1)
	case resilience.EventLimited:
		s.limited.Add(1)
	case resilience.EventWaitOpen:
		s.waited.Add(1)
	case resilience.EventCallDone:
		s.Timed()
		i := s.ringN.Add(1) - 1
		s.ring[i%latencies].Store(int64(e.Duration))
	}
}

// totals are a pipeline's counts since it was registered.
type totals struct {
	Calls, Attempts, Successes, Failures, Retries, Hedged uint64
	Rejected, Throttled, Limited, Waited                  uint64
}

func (s *stats) totals() totals {
	fo, ff, lo, lf := s.Load()
	t := totals{
		Attempts: fo + ff + lo + lf, Successes: fo + lo,
		Retries: s.retries.Load(), Hedged: s.hedged.Load(), Rejected: s.rejected.Load(),
		Throttled: s.throttled.Load(), Limited: s.limited.Load(), Waited: s.waited.Load(),
	}
	t.Calls = fo + ff + t.Rejected
	// A failed attempt is retried or ends its call.
	if f := ff + lf; f > t.Retries {
		t.Failures = f - t.Retries
	}
	return t
}

// quantiles returns the p50 and p99 of the latest timed calls, 0 if none.
func (s *stats) quantiles() (p50, p99 time.Duration) {
	n := min(s.ringN.Load(), latencies)
	if n == 0 {
		return 0, 0
	}
	d := make([]int64, n)
	for i := range d {
		d[i] = s.ring[i].Load()
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return time.Duration(d[min(int(q*float64(n)), int(n)-1)]) }
	return at(0.50), at(0.99)
}
