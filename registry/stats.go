package registry

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// SampleEvery is how often, one call in about so many, the registry's
// listener times a call for the latency quantiles: the call is chosen as
// it starts (the first call, then the first after a random gap of 1 to
// 2*SampleEvery-1 calls, so that a workload with a period does not have
// the same kind of call timed each time), whatever it then takes, and
// the others pay for no clock read. If another listener of the pipeline wants the end of every
// call, every call is timed, and the quantiles are of all.
const SampleEvery = tally.SampleEvery

// latencies is how many of the latest timed calls the quantiles are of.
const latencies = 512

// stats is the listener the registry adds to a pipeline: counters and a
// ring of sampled durations, all atomics, no lock, no allocation. It keeps
// tally.Counts, which the pipeline adds each call to as it starts, and
// each attempt to, by whether it was a call's first and how it ended,
// without an event: the success path costs two atomic additions.
type stats struct {
	tally.Counts
	hedged, rejected, throttled atomic.Uint64
	limited, waited             atomic.Uint64
	ring                        [latencies]atomic.Int64
	ringN                       atomic.Uint64
}

func newStats() *stats { return &stats{} }

// Wants asks for the events the figures are made of. Calls and attempts
// are counted in the Counts, which also choose the calls to time.
func (s *stats) Wants(k resilience.EventKind) bool {
	switch k {
	case resilience.EventHedged, resilience.EventRejected,
		resilience.EventThrottled, resilience.EventLimited, resilience.EventWaitOpen:
		return true
	}
	return false
}

// OnEvent counts e.
func (s *stats) OnEvent(e resilience.Event) {
	switch e.Kind {
	case resilience.EventHedged:
		s.hedged.Add(1)
	case resilience.EventRejected:
		if e.Attempt == 0 { // a call the breaker refused, at its door or its re-check; not a stop between retries
			s.rejected.Add(1)
		}
	case resilience.EventThrottled:
		s.throttled.Add(1)
	case resilience.EventLimited:
		s.limited.Add(1)
	case resilience.EventWaitOpen:
		s.waited.Add(1)
	case resilience.EventCallDone:
		i := s.ringN.Add(1) - 1
		s.ring[i%latencies].Store(int64(e.Duration))
	}
}

// totals are a pipeline's counts since it was registered.
type totals struct {
	Calls, Attempts, Successes, Failures, Retries, Hedged uint64
	Rejected, Throttled, Limited, Waited                  uint64
}

// totals counts calls as they start, and attempts as they end: a
// success ends its call; each retry follows a failed attempt, so a failed
// attempt ends its call unless a retry follows it; an attempt refused
// before it was sent (throttle, concurrency limit, the breaker's
// re-check) is neither a success nor a failure, nor an attempt (it shows
// as throttled, limited or rejected), and is not retried; an attempt its
// caller canceled is an attempt, and ends its call: no failure if it was
// the call's first, a failure if it was a retry (a failed attempt came
// before it), as the breaker counts them; one of class canceled that the
// retry policy retries (RetryIf: the operation's own cancellation) is a
// failed attempt; a call canceled in its backoff
// ends with a failed attempt, a failure too. An answer of class pending
// (resilience.ClassPending: a 409 "in progress") is a failed attempt
// here: a call that ends with one, or that is canceled after one, is a
// failure here and none for the breaker. An operation that panics or
// calls runtime.Goexit is a failed attempt. A call that waits for its breaker
// (WaitWhenOpen) is one call, however often the breaker refused it: each
// refusal is one of Rejected.
func (s *stats) totals() totals {
	calls, f, l := s.Load()
	t := totals{
		Calls: calls, Attempts: f.OK + f.Failed + f.Canceled + l.OK + l.Failed + l.Canceled,
		Successes: f.OK + l.OK, Retries: l.OK + l.Failed + l.Canceled,
		Hedged: s.hedged.Load(), Rejected: s.rejected.Load(),
		Throttled: s.throttled.Load(), Limited: s.limited.Load(), Waited: s.waited.Load(),
	}
	// The failed attempts, less those that a retry followed (every later
	// attempt follows one) and did not end as a failure of its own or,
	// canceled, as the earlier one's: a retry that the throttle or the
	// limit refused ends its call, a failure (its last attempt's). A retry
	// the breaker's re-check refused is not counted (the retry loop stops
	// there, or resumes once the breaker lets it).
	if f.Failed > l.OK {
		t.Failures = f.Failed - l.OK
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
	// Nearest rank: the smallest duration that q of them do not exceed.
	at := func(q float64) time.Duration { return time.Duration(d[max(int(math.Ceil(q*float64(n)))-1, 0)]) }
	return at(0.50), at(0.99)
}
