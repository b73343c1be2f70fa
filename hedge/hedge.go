// Package hedge decides when a slow attempt gets a twin: hedged requests,
// as in Dean and Barroso's "The Tail at Scale" (2013).
//
// A call hedged by a [Policy] sends its attempt and, if no answer has come
// after the policy's delay, sends another in parallel, and another each
// delay after while an attempt is still out, up to [MaxExtra] more; the
// first success wins and the others are canceled. A failure to retry does
// not stop them while a twin is out (with MaxExtra above 1, the slow twin
// gets a twin of its own): only a success, an answer not to retry, or the
// retry stage's next attempt does. The delay is
// fixed ([Delay]) or a quantile of the latencies of recent attempts
// ([Quantile], the default: the 95th percentile), so that about one
// attempt in fifteen to twenty gets a twin (the latencies of attempts cut
// short by a twin pull the quantile down a little): a few percent more
// requests, for a tail cut to about the delay plus a typical latency. Every attempt's latency
// counts, a loser's too: cut short by the winner, it is a lower bound of
// the latency it would have had, and leaving it out would leave out the
// slow tail itself, and hedge more often than the quantile says. A
// pipeline leaves out an attempt that ended with an error of class
// rejected, refused on the caller's side (its operation's, or an inner
// pipeline's gates): no latency of the dependency's.
//
// Hedges have a budget of their own, apart from the retry quota so that
// hedging cannot starve retries: a hedge is sent while the hedges of a
// sliding window of 10 s number fewer than [MaxShare] of its calls (10% by
// default) plus one, whatever the latencies do; so up to one more than
// that share plus one, where it is not a whole number (2 hedges for a
// lone call at 10%). The window slides by whole seconds (ten buckets of
// one): the bound holds over each span of one to ten whole seconds,
// against that span's calls and those of the second before it (a hedge
// counts in the second it is due in, its call in the one it started in),
// so that a lull after a busy spell does not leave the busy calls' budget
// to the calls after it; a span of 10 s across a second's edge may see
// the budgets of the two spans of whole seconds it straddles, up to
// twice that.
//
// In a pipeline (see pipeline.WithHedging), hedging runs inside the retry
// stage, around each attempt: only calls that may be repeated are hedged
// (not a [pipeline.SingleAttempt] call), and an open breaker or an answer
// that must not be retried stops hedging.
package hedge

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/window"
)

// Policy says when to hedge. One Policy serves every call to one
// dependency, whose latencies it learns. It is safe for concurrent use;
// observing a latency takes no lock. A nil *Policy never hedges.
type Policy struct {
	fixed    time.Duration
	quantile float64
	extra    int

	seen    atomic.Uint64      // latencies observed
	samples [kept]atomic.Int64 // the last kept latencies, in ns; -1 for none, 0 a slot not yet written
	delay   atomic.Int64       // the current quantile, in ns; 0: not known yet
	busy    atomic.Bool        // a goroutine is computing delay

	share         float64 // most hedges, per call
	take          sync.Mutex
	clock         *window.Clock
	calls, hedges window.Ring
}

// budgetWindow is the window over which hedges are counted against the
// calls.
const budgetWindow = 10 * time.Second

const (
	kept    = 256 // latencies kept
	minSeen = 32  // latencies needed before a quantile is trusted
	every   = 16  // latencies between updates of the quantile
)

// Option configures a [Policy].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	fixed    time.Duration
	quantile float64
	extra    int
	share    float64
}

// New returns a Policy hedging after the 95th percentile of recent
// latencies, with one extra attempt at most, and hedges for at most 10% of
// the calls, changed by opts.
func New(opts ...Option) *Policy {
	c := config{quantile: 0.95, extra: 1, share: 0.1}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return &Policy{fixed: c.fixed, quantile: c.quantile, extra: c.extra, share: c.share,
		clock: window.NewClock(budgetWindow)}
}

// MaxShare caps the hedges at share of the calls that may be hedged, plus
// one, over a sliding window of 10 s (moving by whole seconds), and over
// each shorter span of whole seconds that ends with the current one (with
// the calls of the second before it, whose hedges fall due in it), so
// that calls after a lull do not spend a busy spell's budget: a budget of
// their own, beside the retry quota, which hedges do not draw on. A hedge counts once due,
// before a pipeline's gates decide whether it is sent. Default 0.1. It panics unless
// 0 < share <= 1.
func MaxShare(share float64) Option {
	if !(share > 0 && share <= 1) {
		panic(fmt.Sprintf("hedge: MaxShare(%v): share must be more than 0 and at most 1", share))
	}
	return optionFunc(func(c *config) { c.share = share })
}

// Called counts a call that may be hedged, for the budget of [MaxShare].
func (p *Policy) Called() {
	if p != nil && p.clock != nil {
		p.clock.Tick(&p.calls)
	}
}

// Take takes a hedge from the budget of [MaxShare] and reports whether
// there was one. Concurrent calls never take more than it allows.
func (p *Policy) Take() bool {
	if p == nil || p.clock == nil {
		return false
	}
	// One at a time: hedges are rare, and two goroutines on either side
	// of a second's edge would each judge by buckets the other has yet to
	// count in (review156: 3 or 4 hedges where 1 was the bound).
	p.take.Lock()
	defer p.take.Unlock()
	e := p.clock.Now(&p.calls)
	// Every span of whole seconds that ends with this one, up to ten,
	// against its calls and those of the second before: the calls of a
	// busy spell lend no budget to the calls after a lull, whichever span
	// one looks at (review154: 100 hedges for 100 calls in the ten seconds
	// after such a spell), and a hedge counts in the second it is due in,
	// its call in the one it started in (review156: calls late in each
	// second got one hedge a second between them).
	var hedges, calls uint64
	for k := range min(e+1, window.Buckets) {
		hedges, calls = hedges+p.hedges.At(e-k), calls+p.calls.At(e-k)
		before := uint64(0)
		if k < e {
			before = p.calls.At(e - k - 1)
		}
		if float64(hedges) >= p.share*float64(calls+before)+1 {
			return false
		}
	}
	p.hedges.Add(e)
	return true
}

// Delay hedges after a fixed d instead of a quantile. Default off: the
// [Quantile] 0.95. It panics unless d is positive.
func Delay(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("hedge: Delay(%v): d must be positive", d))
	}
	return optionFunc(func(c *config) { c.fixed, c.quantile = d, 0 })
}

// Quantile hedges after the q-quantile of the latencies of the last 256
// attempts, once 32 are known (until then, it does not hedge). A latency
// of 0 or less (a clock coarser than the answers) counts as 0; a quantile
// of 0 hedges after 1 ns, within [MaxShare]. Default 0.95. It panics
// unless 0 < q < 1.
func Quantile(q float64) Option {
	if math.IsNaN(q) || q <= 0 || q >= 1 {
		panic(fmt.Sprintf("hedge: Quantile(%v): q must be in (0, 1)", q))
	}
	return optionFunc(func(c *config) { c.fixed, c.quantile = 0, q })
}

// MaxExtra sets the most hedges a single attempt gets. Default 1. It
// panics if n is under 1.
func MaxExtra(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("hedge: MaxExtra(%d): n must be at least 1", n))
	}
	return optionFunc(func(c *config) { c.extra = n })
}

// After returns how long to wait for an attempt before sending a hedge,
// and false if the policy does not hedge (yet).
func (p *Policy) After() (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	if p.fixed > 0 {
		return p.fixed, true
	}
	d := p.delay.Load()
	return time.Duration(d), d > 0
}

// Extra returns the most hedges an attempt gets: 0 for a nil *Policy.
func (p *Policy) Extra() int {
	if p == nil {
		return 0
	}
	return p.extra
}

// Learns reports whether the policy wants [Policy.Observe]d latencies.
func (p *Policy) Learns() bool { return p != nil && p.fixed == 0 }

// Observe records the latency of an attempt, however it ended: that of
// one canceled because another won is a lower bound, and still a sample.
func (p *Policy) Observe(d time.Duration) {
	if !p.Learns() {
		return
	}
	v := int64(d)
	if v <= 0 {
		v = -1
	}
	n := p.seen.Add(1)
	p.samples[(n-1)%kept].Store(v)
	if n >= minSeen && n%every == 0 && p.busy.CompareAndSwap(false, true) {
		p.update(min(n, kept))
		p.busy.Store(false)
	}
}

// update sets the delay to the quantile of the first n samples, less
// those whose Observe has counted but not yet written them.
func (p *Policy) update(n uint64) {
	var buf [kept]int64
	s := buf[:0]
	for i := range n {
		if v := p.samples[i].Load(); v != 0 {
			s = append(s, max(v, 0))
		}
	}
	if len(s) == 0 {
		return
	}
	slices.Sort(s)
	p.delay.Store(max(s[int(p.quantile*float64(len(s)-1))], 1))
}
