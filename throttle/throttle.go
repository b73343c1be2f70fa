// Package throttle sheds load on the caller's side when a dependency has
// been refusing work: adaptive client-side throttling, as in Google's SRE
// book (chapter "Handling Overload").
//
// A [Throttle] counts, over a sliding window, the attempts its pipeline
// made (requests) and those the dependency accepted (accepts: it answered,
// success or a caller's error such as a 400; not an overload, a 503 or a
// timeout). Each new attempt is refused locally, before it is sent, with
// probability
//
//	max(0, (requests - K*(accepts+1)) / (requests + 1))
//
// one accept assumed beside those counted (the book's formula has none),
// and nothing refused while the window holds fewer than 10 answers of the
// dependency (accepts and failures), unless it holds more of the
// throttle's own refusals: a lone failure, or a few stale connections
// reset at once, followed by a burst of calls, is not an overload; a
// dead dependency whose failures come slowly, the last ones gone from the
// window, still is.
//
// An attempt counts as a request as it is sent, so that the throttle sees
// the load as it goes out, not an attempt's duration later; the attempts
// still out count among the accepts at the rate the dependency has been
// accepting the attempts it answered (refusals of the throttle's own left
// out, the assumed accept in), so that a burst to a healthy dependency is
// not taken for refusals, while attempts piling up at one that has been
// failing are. So while the dependency accepts well over one attempt in
// K nothing is refused (near one in K, the windows' swings refuse a few: a
// review saw 2 to 32 attempts refused in 120 s with 40% failing); when it
// accepts fewer, the rest fail at once with [ErrThrottled] at no cost to
// the dependency. K is 2 by default.
//
// A refused attempt counts as a request as the book counts it while the
// dependency is failing of late: it becomes so once its answers over the
// last fifth of the window hold more than K-1 failures for each accept,
// and two more, and stops being so once they hold an accept and at most
// (K-1)/2 failures for each. The throttle then sends about K times what
// the dependency accepts, whatever the demand: at 1,000 calls a second to
// a dependency that accepts 100, 195 to 206 attempts a second (a plain
// client: 1,000), and to one that accepts nothing about one a second
// (TestWhatTheDependencyGets, 100 runs). A dependency overloaded into a
// bad state that it leaves only once its load falls near what it still
// serves needs that cut: counting refusals at the share let through,
// below, it got 3.4 to 4.7 times what it accepted and stayed down
// (review97, TestReview97MetastableDependencyRecovers). Once the
// dependency is no longer failing of late, a refusal counts as a request
// only with the probability that an attempt is let through, 1-p. A caller
// that calls again as soon as it is refused (a worker taking the next
// job) makes its refusals as fast as the throttle answers: counted in
// full, they kept the share refused where the failures left it long
// after the dependency was back (a review: 99.6% of a healthy
// dependency's calls refused 2 s after a 30 ms blip, with a 1 s window);
// thinned, they add about p requests for each attempt sent, however fast
// the caller repeats. An attempt admitted and then taken back (below: a
// concurrency limit after the throttle refused it) takes back one of the
// refusals counted so in its bucket too: workers spinning on a full limit
// admit many attempts for each one sent, and their refusals, counted for
// each admission, held a shared throttle near 90% refused against a
// healthy dependency with 1 to 5% of failures for as long as they spun
// (review104; TestReview104BatchBulkheadHoldsSharedThrottle). Such workers
// still send what the limit lets through during an outage (a refusal is
// drawn per admission, not per second), so the throttle is slower to
// let go after it: 6 s after a 6 s outage there. Where nothing failed in the window, the throttle
// refuses nothing, whatever its own refusals there: they say nothing of
// the dependency (TestWorkerLoopAfterABlip, TestRefusalsAloneRefuseNothing).
// And whatever p, the first attempt of a bucket (a tenth of the window)
// in which none was sent goes through, so that the throttle hears within
// a bucket that the dependency is back (see [K]). A dependency that fails
// more than 1-1/K of its attempts for a reason other than load (60% of
// 503s at random, say) gets a trickle too, 3 to 16 of a plain client's
// 400 successes a second: use the throttle where the failures are an
// overload's.
//
// The attempts still out count at the rate of those answered: a
// dependency whose successes take far longer than its failures (a 503 at
// once, a success in seconds) is refused some calls until its first
// successes come back, from a cold start or after an idle spell longer
// than the window (review104: up to 82 of the first 1,000 calls at 100 a
// second, successes in 2 s and 5% failing at once; 97 of 500 with 3 s
// and 10%). Counting them as accepts instead let a burst pile up on a
// dependency that had failed every answer.
//
// Ten failures or more in a window with no accept, as a pool of stale
// connections reset at once after an idle spell gives, are taken for an
// overload: their retries are mostly refused (17 of 20 on average,
// TestStaleConnectionsAfterIdle, where a plain retry completes all).
// net/http retries itself a request it sent on a reused connection that
// failed before any answer, where the request is idempotent, so most
// such resets never reach the throttle.
//
// In a pipeline (see pipeline.WithThrottle) the throttle guards each
// attempt, retries and hedges included, inside the retry stage; an
// attempt that the caller's deadline ended is taken back, as a canceled
// one (the pipeline's attempt timeout and time budget count). A refused
// attempt's error is of class [resilience.ClassRejected]: not retried, not
// counted by the breaker, which counts a call whose retry it refused as
// the failure its sent attempt was (retrypolicy.Error.Answer). A probe of
// a breaker not closed passes it, uncounted.
package throttle

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/internal/window"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// ErrThrottled is the error of an attempt that a [Throttle] refused: the
// dependency has been refusing too much work of late. Its class is
// [resilience.ClassRejected].
var ErrThrottled = resilience.Rejected(errors.New("throttled: the dependency has been refusing work"))

// Throttle refuses attempts on the caller's side while a dependency
// refuses work. One Throttle serves every call to one dependency. It is
// safe for concurrent use and takes no lock: each attempt adds to atomic
// counters, and the clock is read once in up to 64 attempts while they
// are frequent. A nil *Throttle refuses nothing.
type Throttle struct {
	k                float64
	clock            *window.Clock
	requests, accept window.Ring
	failed           window.Ring  // the dependency's failures, of the answered attempts
	refused          window.Ring  // the throttle's own refusals
	thinned          window.Ring  // those of them counted in requests, at the share let through
	out              atomic.Int64 // admitted, not yet Done
	overloaded       atomic.Bool  // the dependency is failing of late: every refusal a request
	probed           atomic.Int64 // the bucket (+1) of the last attempt let through whatever p
	reached          atomic.Int64 // the bucket (+1) of the last attempt taken back that was sent: its probe is had
}

// New returns a Throttle with K 2 over a window of 10 s, changed by opts.
func New(opts ...Option) *Throttle {
	c := config{k: 2, window: 10 * time.Second}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return &Throttle{k: c.k, clock: window.NewClock(c.window)}
}

// Option configures a [Throttle].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	k      float64
	window time.Duration
}

// K sets how many times the accepts the throttle lets through: requests
// are refused only while they number more than k times the accepts, so
// the throttle refuses once the dependency fails more than 1-1/k of its
// attempts. Lower is more aggressive. After an outage the throttle
// refuses nearly every call until the dependency accepts the attempt let
// through in each bucket, and soon after nothing: after a 30 s outage at
// 1,000 calls a second, with the default window, the last call is
// refused 0.01 to 1.06 s after the dependency is back, 9 to 1,036 calls
// refused meanwhile, with 2; 1 to 1.14 s with 1.5; 1.1 to 5.9 s with 1.1
// (TestRecoveryTimeByK, 90 runs on 6 December 2026; counting every
// refusal, as the book does, took 44 to 52 s with 2). Once back, a
// dependency failing 1 to 30% of its attempts at random is refused
// nothing 5.1 s after its return at most (100 runs at 30%,
// TestReview100RecoveryWithBackgroundFailures). The nearer a healthy
// dependency's share of failures comes to what k tolerates, the slower
// this: with 1.1 (9.1%), after a 10 s outage, a dependency back with 1 to
// 3% failing at random was refused 2 to 13 s after its return at 500 and
// 1,000 calls a second, up to 19 s at 100; with 6%, 16 to 35 s; with 8%,
// most of a minute; with 2, 45% took up to 26 s (12 runs of each at 100,
// 500 and 1,000 calls a second, TestReview160LowKRecoveryWithBackgroundFailures):
// choose a k that tolerates well over the failures of a healthy
// dependency. At lower rates the tail
// is longer, fewer answers in each bucket: at 100 and 300 calls a second,
// with 30% failing, medians of 1.2 to 1.9 s and 90% of runs within 3.7
// s, up to 10.6 s seen; at 10 to 50 a second, medians of 2.2 to 4.3 s,
// 90% within 8 s, up to 15 s seen (five rounds of 200 runs of each,
// TestReview104RecoveryAtLowerRates with its runs set to 200): each attempt let
// through a bucket that fails adds a bucket. And at a few calls a second
// with 30% failing, chance runs of failures in a window that holds few
// answers refuse a few calls: 3 to 9 an hour (review104). Default 2. It panics
// unless k is a finite number of at least 1.1.
func K(k float64) Option {
	if math.IsNaN(k) || math.IsInf(k, 0) || k < 1.1 {
		panic(fmt.Sprintf("throttle: K(%v): k must be a finite number >= 1.1", k))
	}
	return optionFunc(func(c *config) { c.k = k })
}

// Window sets the sliding window over which requests and accepts are
// counted, in 10 buckets: shorter reacts faster, to both an overload and
// its end. A bucket is known by its number mod 2^32: a throttle idle for
// a multiple of 2^32 buckets, to within a window (50 days with a 10 ms
// window, 1,361 years with the default), counts its old buckets again
// (review150). Default 10 s. It panics if d is under 10 ms.
func Window(d time.Duration) Option {
	if d < 10*time.Millisecond {
		panic(fmt.Sprintf("throttle: Window(%v): d must be at least 10ms", d))
	}
	return optionFunc(func(c *config) { c.window = d })
}

// Ticket is what [Throttle.Admit] gives an attempt it admits, to hand
// back to [Throttle.Done]: the bucket of time the attempt was counted in.
// Its value means nothing else.
type Ticket uint64

// Admit decides whether an attempt may be sent. An admitted attempt is
// counted as a request now, as it is sent (so the throttle sees the load
// as it goes out, not an attempt's duration later), and must be reported
// with [Throttle.Done] and the Ticket. A refused one gets [ErrThrottled],
// counted as a request that was not accepted: always while the
// dependency is failing of late, else with the probability 1-p that it
// would have been let through (see the package doc). A nil *Throttle admits every
// attempt.
func (t *Throttle) Admit() (Ticket, error) {
	if t == nil {
		return 0, nil
	}
	if p := t.RejectProbability(); p > 0 && rand.Float64() < p {
		if e := t.clock.Epoch(); !t.probe(e) { // the clock was just read
			if rand.Float64() >= p { // at the share let through: see the package doc
				t.requests.Add(e)
				t.thinned.Add(e)
			}
			t.refused.Add(e)
			return 0, ErrThrottled
		}
	}
	t.out.Add(1)
	return Ticket(t.clock.Tick(&t.requests)) + 1, nil
}

// probe reports whether an attempt the draw refused in bucket e goes
// through all the same: the first of a bucket (a tenth of the window) in which no attempt
// was sent, so that the throttle hears when the dependency is back within
// a bucket, not only when the trickle the formula lets through (about K
// a window) comes.
func (t *Throttle) probe(e int64) bool {
	last := t.probed.Load()
	return last <= e && t.requests.At(e) <= t.thinned.At(e) && t.probed.CompareAndSwap(last, e+1)
}

// Done reports the end of an attempt that [Throttle.Admit] admitted with
// tk, with its error: accepted by the dependency unless the error is a
// failure of it ([resilience.Class] Failure: an overload, a 503, a
// timeout). An attempt that the caller canceled, or that was not sent
// after all (an error of class [resilience.ClassRejected] or
// [resilience.ClassCanceled]), or whose error's methods panic as it is
// classified, is taken back, as if never made. One that a pipeline
// admitted and then did not send (a later stage refused it), the
// attempt let through whatever the probability in a bucket where none
// was then sent, leaves that bucket's probe to the next attempt.
func (t *Throttle) Done(tk Ticket, err error) {
	if t == nil || tk == 0 {
		return
	}
	// The attempt stays out until its answer is counted: a reading
	// between the two (probability) counts it twice, not as a request
	// that nothing answered, which would refuse others.
	defer t.out.Add(-1)
	c, ok := classify.Safely(err)
	switch {
	case !ok || c == resilience.ClassCanceled || c == resilience.ClassRejected:
		e := int64(tk - 1)
		t.requests.Remove(e)
		if t.thinned.Remove(e) { // the refusals counted at the share let through stand for attempts sent
			t.requests.Remove(e)
		}
		if _, sent := classify.Sent(err); sent {
			t.reached.Store(e + 1)
		} else if t.reached.Load() != e+1 && t.requests.At(e) <= t.thinned.At(e) {
			// A pipeline's attempt not sent after all, and none sent in e:
			// its probe, if this was it, is owed (review160). Not once one
			// sent and then canceled reached the dependency in e (review162:
			// a probe per caller's deadline at a hanging dependency;
			// review163: a second after one, by a later refusal).
			t.probed.CompareAndSwap(e+1, e)
		}
	case !c.Failure():
		t.accept.Add(t.clock.Epoch())
	default: // rare while all is well, and what moves the probability: on time
		t.failed.Add(t.clock.Now(&t.requests))
	}
}

// RejectProbability returns the probability that the throttle refuses an
// attempt now: max(0, (requests - K*(accepts+1)) / (requests + 1)) over
// its window, the attempts still out counted among the accepts at the
// rate of the answered ones; 0 while the window holds fewer than 10
// answers of the dependency, and for a nil *Throttle.
func (t *Throttle) RejectProbability() float64 {
	if t == nil {
		return 0
	}
	p := t.probability(t.clock.Epoch())
	if p > 0 { // rare while all is well: worth an exact reading of the clock
		p = t.probability(t.clock.Now(&t.requests))
	}
	return p
}

// failing reports whether the dependency is failing of late, by its
// answers over the window's last two buckets (a fifth of it): it becomes
// so once they hold more than K-1 failures for each accept, and two more
// (past the share of failures K tolerates, not by a chance few), and
// stops being so once they hold an accept and at most (K-1)/2 failures
// for each (within the tolerance, with a margin: at the book's balance,
// where the dependency accepts one attempt in K, it stays failing, also
// through the chance swings of a few answers; with 0.8(K-1), a dependency
// held in a bad state, failing by 1 s timeouts, got bursts of 270
// attempts a second).
// Between the two, and with no answer, it is as it was.
func (t *Throttle) failing(e int64) bool {
	acc, failed := float64(t.accept.At(e)), float64(t.failed.At(e))
	if e > 0 {
		acc, failed = acc+float64(t.accept.At(e-1)), failed+float64(t.failed.At(e-1))
	}
	was := t.overloaded.Load()
	switch {
	case !was && failed > (t.k-1)*acc+2:
		t.overloaded.Store(true)
		return true
	case was && acc > 0 && failed <= 0.5*(t.k-1)*acc:
		t.overloaded.Store(false)
		return false
	}
	return was
}

// minAnswers is the fewest answers of the dependency (accepts and
// failures) in the window before the throttle refuses anything.
const minAnswers = 10

func (t *Throttle) probability(e int64) float64 {
	if t.failed.Sum(e) == 0 {
		// The common case, read first. And where nothing failed in the
		// window, the throttle's own refusals refuse nothing.
		return 0
	}
	// Read in the order opposite to Done's, so that an attempt whose
	// answer comes meanwhile counts as out and answered, not as neither.
	req := float64(t.requests.Sum(e))
	refused, thinned := float64(t.refused.Sum(e)), float64(t.thinned.Sum(e))
	if t.failing(e) { // every refusal a request, as the book counts them
		req += max(0, refused-thinned)
	}
	out := min(max(0, float64(t.out.Load())), req)
	acc, failed := float64(t.accept.Sum(e)), float64(t.failed.Sum(e))
	if acc+failed < minAnswers && refused <= acc+failed {
		// Too few answers to tell an overload from a blip; but not where
		// the throttle has been refusing more than it heard answers: a
		// dead dependency whose failures come slowly, the last burst's
		// failures gone from the window together, would get all the
		// load until the next burst's came back.
		return 0
	}
	// One accept is assumed beside those counted. The rate the dependency
	// accepts at is of the attempts it answered: not of those refused
	// here, which say nothing of it, and would keep the rate down, and the
	// refusals up, once anything made them start.
	acc++
	rate := acc / (acc + failed)
	return max(0, (req-t.k*(acc+out*rate))/(req+1))
}
