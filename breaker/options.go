package breaker

import (
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Option configures a [Breaker].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	consecutive      uint32
	rate             float64
	rateMin          uint32
	window           time.Duration
	buckets          int
	openTimeout      time.Duration
	halfOpenRequests uint32
	failIf           func(error) bool
	ignoreIf         func(error) bool
	listeners        []resilience.Listener
	shared           SharedStore
	flush            time.Duration
}

func defaults() config {
	return config{
		consecutive:      5,
		window:           time.Minute,
		buckets:          6,
		openTimeout:      100 * time.Millisecond,
		halfOpenRequests: 1,
		flush:            100 * time.Millisecond,
	}
}

// readyToTrip opens the breaker when either configured threshold is met;
// the failure rate only if rate (a shared breaker's is the fleet's, except
// while it decides alone).
func (c *config) readyToTrip(n Counts, rate bool) bool {
	if c.consecutive > 0 && n.ConsecutiveFailures >= c.consecutive {
		return true
	}
	if c.rate > 0 && rate {
		done := uint64(n.TotalSuccesses) + uint64(n.TotalFailures)
		return done >= uint64(c.rateMin) && float64(n.TotalFailures) >= c.rate*float64(done)
	}
	return false
}

// ConsecutiveFailures opens the breaker after n failures in a row in the
// window ([Window]): a run that began in a bucket the window dropped keeps
// only its failures still in it. Default
// 5; n = 0 turns this threshold off: without [FailureRate] too, the breaker
// never opens (it still counts, for tests and measurements).
func ConsecutiveFailures(n uint32) Option {
	return optionFunc(func(c *config) { c.consecutive = n })
}

// FailureRate opens the breaker when at least minRequests calls have ended
// in the window and the share of failures among them reaches ratio. It
// works beside [ConsecutiveFailures]: either trips the breaker. Default
// off. It panics unless 0 < ratio <= 1 (NaN included); a minRequests of 0
// counts as 1, and one above 2^30 as 2^30: a closed window halves its
// counts when it reaches 2^31 calls, so it might never hold more (fewer
// ended in success or failure where many were excluded).
func FailureRate(ratio float64, minRequests uint32) Option {
	if !(ratio > 0 && ratio <= 1) {
		panic(fmt.Sprintf("breaker: FailureRate(%v, %d): ratio must be more than 0 and at most 1", ratio, minRequests))
	}
	return optionFunc(func(c *config) {
		c.rate = ratio
		c.rateMin = min(max(minRequests, 1), halveAt/2)
	})
}

// MaxBuckets is the most buckets a [Window] may have: the breaker's work
// under its lock grows with their number, up to its square after a pause.
const MaxBuckets = 100

// Window sets the rolling window over which a closed breaker counts
// outcomes, as buckets slices of d: the oldest slice drops out as time
// passes. Default 60 s in 6 buckets; d = 0 counts without a window (only a
// state change clears the counts); 1 bucket clears all counts every d. A
// call counts in the slice it was sent in, or in the current one as it
// ends if it took so long that its own left the window (with one bucket:
// if the window started anew while it ran), so that calls longer than the
// window, a hang's, still open the breaker. It
// panics if d is negative, buckets is not from 1 to [MaxBuckets], or a
// bucket would be under a millisecond.
func Window(d time.Duration, buckets int) Option {
	if d < 0 || buckets < 1 || buckets > MaxBuckets || (d > 0 && d < time.Duration(buckets)*time.Millisecond) {
		panic(fmt.Sprintf("breaker: Window(%v, %d): d must be 0 or more and buckets from 1 to %d", d, buckets, MaxBuckets))
	}
	return optionFunc(func(c *config) {
		c.window = d
		c.buckets = buckets
	})
}

// OpenTimeout sets how long the breaker stays open before it lets probe
// calls through. Default 100 ms: a probe every 100 ms finds a dependency
// back within 100 ms, at the cost of up to 10 probes a second per breaker
// to a dead one (docs/storm.md measures both; with many replicas or a
// breaker per host, a longer timeout, say 1 s, bounds that cost). It
// panics if d is not positive.
func OpenTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("breaker: OpenTimeout(%v): d must be more than 0", d))
	}
	return optionFunc(func(c *config) { c.openTimeout = d })
}

// HalfOpenRequests sets how many probe calls a half-open breaker lets
// through at once; that many successes in a row close it. A probe that has
// not answered for 10 open timeouts (1 s by default) lets another go, and
// another each 10 open timeouts after, so that a probe that never answers
// does not hold the breaker half-open for ever; an answer that comes late
// still counts. A shared breaker's fleet ([Shared]) runs that many at
// once fleet-wide, one per replica. Default 1; n = 0 means 1. A large n
// keeps a breaker half-open for as many calls, any failure among them
// opening it again: with math.MaxUint32, it never closes.
func HalfOpenRequests(n uint32) Option {
	return optionFunc(func(c *config) { c.halfOpenRequests = max(n, 1) })
}

// FailIf replaces the test for whether a call's error counts as a failure;
// an error that is not a failure counts as a success. A call stopped by
// its caller or a gate after the dependency answered is judged by that
// answer, and left out, not a success, if fn says no. Default: its
// [resilience.Class] is transient or terminal.
func FailIf(fn func(err error) bool) Option {
	return optionFunc(func(c *config) { c.failIf = fn })
}

// IgnoreIf leaves out of the counts the outcomes whose error fn reports
// true for, besides those always left out: the caller canceled (its
// context, or the error is of class canceled), or the error is of class
// [resilience.ClassRejected] (refused on the caller's side: the
// dependency never saw the call) or [resilience.ClassPending]. Default
// none besides those.
func IgnoreIf(fn func(err error) bool) Option {
	return optionFunc(func(c *config) { c.ignoreIf = fn })
}

// WithListener reports the breaker's state changes, the events of its
// shared state store and its rejections to l, after any listener set
// before: for a breaker used on its own. A pipeline's listener
// (pipeline.WithListener) hears the state changes of its breaker without
// it, and the rejections of its own calls; a listener given to both hears
// each event once. State changes are reported under the breaker's
// lock: l must not call the breaker, and every call through the breaker
// waits while l runs (a listener that writes to the network should hand
// the event to a goroutine of its own). Default none, at no cost.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) { c.listeners = append(c.listeners, l) })
}
