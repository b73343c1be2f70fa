package breaker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// SharedStore keeps the fleet-wide state of the breakers of one name that
// the replicas of a service share (see [Shared]). Each replica calls Sync
// from a background flusher, never on a call's path. The breakerstore
// package of the nested module github.com/resiliencekit/resiliencekit/redis
// has one on Redis. Implementations are safe for concurrent use and honour
// ctx's deadline and cancellation. A panic or runtime.Goexit in any method
// of a store (this interface's and the optional ones below) is taken as
// that call's error, and so is a method that has not returned when its
// context ends: the breaker stops waiting for it (its goroutine is left
// to end when the method returns).
type SharedStore interface {
	// Sync adds a replica's outcomes since its last Sync to the fleet's
	// counts, if they were made under the fleet's current generation,
	// records the outcome of its probes (likewise), decides from the
	// fleet-wide counts whether the fleet breaker opens or closes, and
	// returns the fleet's state; if s.WantProbe and the fleet is half-open,
	// it grants this replica one of the fleet's HalfOpenRequests probes, if
	// one is left.
	Sync(ctx context.Context, name string, s Sync) (Fleet, error)
}

// SharedWatcher is implemented by a [SharedStore] that can tell a replica
// at once when the fleet breaker changes state, with the new state and
// generation, so that a replica learns it within a one-way trip, even one
// whose round trip is too slow for its flushes. Watch calls changed with
// each change (ProbeGranted false) until ctx is done or it fails; the
// breaker calls it again after a flush interval.
type SharedWatcher interface {
	Watch(ctx context.Context, name string, changed func(Fleet)) error
}

// SharedReader is implemented by a [SharedStore] that can tell the fleet
// breaker's state and its totals in the current window, for dashboards
// and tests (see [Breaker.Fleet]). It changes nothing.
type SharedReader interface {
	Read(ctx context.Context, name string, p FleetPolicy) (FleetStatus, error)
}

// FleetStatus is the fleet breaker's state as its store holds it.
type FleetStatus struct {
	State      resilience.State
	Generation uint64
	// Requests and Failures are the fleet's totals in the window, counted
	// in the current generation (while closed; a change of state starts
	// them afresh).
	Requests, Failures uint64
}

// Sync is what a replica tells its [SharedStore].
type Sync struct {
	// Batch identifies the counts below: a Sync that failed is sent again
	// with the same Batch and counts, and a store applies a Batch once, so
	// that counts whose answer was lost are not counted twice. Empty: no
	// counts. A batch of an unknown generation (GenerationUnknown) is not
	// sent again: a store that lost its record of it meanwhile could not
	// tell it from a new one. It is the replica's id (Replica), a dash
	// and the batch's number, which grows by one from batch to batch: a
	// replica forms its next batch once the store took the last (or,
	// of an unknown generation, gave up on it), so a store may keep only
	// the latest number of each replica.
	Batch string
	// Requests and Failures count the outcomes of the batch: calls that
	// ended, and the failures among them, all admitted under Generation.
	Requests, Failures uint64
	// ProbeSuccesses and ProbeFailures count the outcomes of the probes
	// this replica ran for the fleet's half-open Generation.
	ProbeSuccesses, ProbeFailures uint32
	// GenerationUnknown says the replica had heard no generation yet (it
	// had just started) when it made the counts: they count in the
	// current one, unless they began before the fleet's last change of
	// state (see CountsAge).
	GenerationUnknown bool
	// CountsAge is how long ago, as the Sync is sent, the replica began
	// the counts of a batch of an unknown generation. A store drops such
	// counts when they began before the fleet last changed state: those of
	// a replica cut off from its start, through an outage, back after the
	// recovery, belong to a generation that is over. Zero: not said.
	CountsAge time.Duration
	// Generation is the fleet's generation as this replica last saw it,
	// and State its state as this replica goes by it: closed once the
	// store has not confirmed an open or half-open state for longer than
	// the staleness bound (see [Breaker.FleetState]). The counts and probe
	// outcomes above were made under Generation: a store whose generation
	// is another drops them. A store that lost its state (restarted empty)
	// takes the state back from a replica that says it is not closed, as
	// opened OpenedFor ago, under a generation never used before.
	Generation uint64
	State      resilience.State
	// OpenedFor is how long this replica has known the fleet not closed
	// in Generation (at least OpenTimeout if it saw it half-open): a store
	// restarted empty restores the state as opened that long ago.
	OpenedFor time.Duration
	// Replica identifies this replica: a store keeps at most one probe
	// grant per replica, and gives it back to a flush that asks again (its
	// answer to the flush that granted it was lost).
	Replica string
	// WantProbe asks for a probe, if the fleet is half-open: a call of this
	// replica is waiting to probe.
	WantProbe bool
	// OwnHalfOpen says this replica's own breaker is half-open, not
	// closed: it may not reach the dependency, so the store grants it a
	// probe only if no replica whose own breaker is closed asked for one
	// in the last two flush intervals.
	OwnHalfOpen bool
	// ProbeRunning says a probe this replica was granted still runs: its
	// grant is kept.
	ProbeRunning bool
	// ProbeHeld says this replica holds a grant it has not used yet: the
	// store keeps it until it expires, three flush intervals after it was
	// granted (the replica drops it a flush interval after it asked). A
	// replica that neither holds nor runs nor wants a probe gives its
	// grant up.
	ProbeHeld bool
	// Policy is the fleet breaker's configuration.
	Policy FleetPolicy
}

// FleetPolicy is how the fleet breaker decides, from [FailureRate],
// [Window], [OpenTimeout] and [HalfOpenRequests].
type FleetPolicy struct {
	Rate             float64
	MinRequests      uint32
	Window           time.Duration
	Buckets          int
	OpenTimeout      time.Duration
	HalfOpenRequests uint32
	// ProbeTimeout is how long a running probe's grant lasts before
	// another replica may have it, unless the replica running the probe
	// says again that it still runs: the larger of OpenTimeout and three
	// flush intervals. A grant not used expires after three flush
	// intervals.
	ProbeTimeout time.Duration
	// FlushInterval is the replicas' ([FlushInterval]).
	FlushInterval time.Duration
}

// Fleet is the fleet breaker's state as a store returns it.
type Fleet struct {
	State resilience.State
	// Generation changes with each change of state.
	Generation uint64
	// ProbeGranted says the replica holds a probe grant: one granted by
	// this answer, or one granted before and still held (its answer may
	// have been lost). A flush's answer without it takes back any permit
	// the replica holds.
	ProbeGranted bool
	// ForceVersion grows with each mode set fleet-wide by a
	// [SharedForcer]'s Force, 0 if none ever was: a replica that sees a
	// newer one than it took reads the mode (SharedForcer.Forced) and
	// takes it; an older one, it writes its own back (Restore).
	ForceVersion uint64
	// ChangedFor is how long ago the fleet last changed state, 0 if the
	// store does not say. A replica that had heard no generation drops,
	// rather than takes as the current generation's, counts it began
	// before that change (see Sync.CountsAge).
	ChangedFor time.Duration
	// Previous is the generation that the fleet's last change of state
	// ended, 0 if the store does not say. A replica that vouched for the
	// dependency counts the calls it made after its own probes in the
	// closed generation whose Previous is the half-open one they were made
	// in; with a store that does not say, it drops them, as any calls of
	// a half-open generation. A store that cannot vouch for it (a change
	// made by another version, a state taken back from a snapshot) says 0;
	// a change heard by [SharedWatcher] need not say it.
	Previous uint64
}

// ErrFleetUnconfirmed is the error of the
// [resilience.EventSharedStateUnavailable] event of a shared breaker whose
// store has not confirmed the fleet's open or half-open state for longer
// than the larger of [OpenTimeout] and three flush intervals: the replica
// decides alone (its own breaker, with [FailureRate] applied locally)
// until the store answers again.
var ErrFleetUnconfirmed = errors.New("fleet state unconfirmed for longer than the open timeout: deciding locally")

// Shared makes the replicas of a service share this breaker's failure
// rate: the outcomes of calls are counted in memory (atomics, no lock, no
// I/O on the call's path) and sent to store by a background flusher once
// every [FlushInterval], whatever the traffic, which gets back the fleet's
// state (a first flush, with no counts, at once as the breaker is made: a
// call that comes before it has answered waits for it, a tenth of
// FlushInterval at most, and then goes by this replica's own breaker); a call is rejected if the fleet breaker or this replica's own is
// open. [FailureRate] over [Window] is the fleet's rule; [ConsecutiveFailures]
// stays each replica's own, so one replica cut off from the dependency
// opens its own breaker without opening the fleet's, as long as the other
// replicas' calls outnumber its own breaker's probes (one each
// [OpenTimeout]) in the window: with them quiet, those probes' failures
// can hold the fleet open too. When the fleet breaker turns half-open,
// exactly [HalfOpenRequests] probes run fleet-wide, granted by the store
// to replicas whose own breaker is not open, one at a time per replica
// (so with n replicas probing, it takes about HalfOpenRequests/n flush
// intervals); the others are rejected at once, never kept waiting, but
// for a call that comes more than two flush intervals after the last of
// its replica's that wanted to probe: that one asks the store at once,
// with a flush of its own, and waits for its answer, two flush intervals
// at most, within its context. Where calls come less often than flushes,
// a probe granted at the next flush would lapse before the next call came,
// and the fleet stay half-open, every call rejected.
//
// The shared state can only make a replica more careful for a bounded
// time, never block it for ever: this replica's own breaker moves from
// open to half-open on its own timer, and a fleet state that the store
// has not confirmed for longer than [OpenTimeout] (or three flush
// intervals, if longer) gives way to this
// replica's own decisions (an [resilience.EventSharedStateUnavailable]
// with [ErrFleetUnconfirmed]) until the store answers again. While the
// store fails or hangs, calls go on at full speed,
// [resilience.EventSharedStateUnavailable] says so, [FailureRate] applies
// to this replica's own calls from then on (with the run of failures or
// successes before, which [ConsecutiveFailures] goes by: not the calls
// the fleet judged, which a local breaker would have judged as they
// came), and sharing resumes at the first flush that
// reaches the store ([resilience.EventSharedStateRestored]), counts made in
// the fleet's current generation included. If that flush finds the fleet
// still in the opening this replica last heard of, while this replica's
// own breaker is closed and its own calls succeeded while it decided
// alone (at least [HalfOpenRequests] of them), the opening is stale for
// it: it goes on deciding alone until the fleet changes state, and the
// outcomes of its first HalfOpenRequests calls of the fleet's half-open
// state are the fleet's probes, so that the fleet closes (or opens again)
// without refusing a call to a dependency that answers. A shared breaker runs a
// goroutine: call [Breaker.Close] when done with it. New panics if the
// breaker has no [FailureRate] or a [Window] of 0. Default: not shared.
// docs/shared-breaker.md tells the model.
func Shared(store SharedStore) Option {
	return optionFunc(func(c *config) { c.shared = store })
}

// MaxFlushInterval is the longest [FlushInterval]: a day. The bounds the
// breaker derives from it (three intervals of staleness, two for Close)
// stay far from overflowing a time.Duration.
const MaxFlushInterval = 24 * time.Hour

// FlushInterval sets how often a shared breaker sends its counts and
// learns the fleet's state: how stale a replica's view of the fleet may
// be when its store cannot tell it at once ([SharedWatcher]). Each flush
// is bounded by the interval too (the store's timeout), and Close takes
// at most two intervals: keep it well above the store's round trip, or
// no flush gets through. Default 100 ms. It panics if d is not positive,
// or above [MaxFlushInterval].
func FlushInterval(d time.Duration) Option {
	if d <= 0 || d > MaxFlushInterval {
		panic(fmt.Sprintf("breaker: FlushInterval(%v): d must be more than 0 and at most %v", d, MaxFlushInterval))
	}
	return optionFunc(func(c *config) { c.flush = d })
}

// tally counts the outcomes of calls admitted under one generation of the
// fleet; it is replaced when the generation changes, so that counts of an
// old generation are never sent under a new one.
type tally struct {
	gen     atomic.Uint64
	unknown atomic.Bool // made before the replica heard any generation
	// counts holds requests (high 32 bits) and failures (low 32 bits):
	// one atomic, so that a batch never has a failure without its
	// request. The flusher drains it at every flush into the two below
	// (its own), far before either half overflows.
	counts             atomic.Uint64
	requests, failures uint64    // drained, not yet in a batch; the flusher's
	from               time.Time // the oldest of them made after this; the flusher's
	// heldUntil, if not 0, is when (in ns since the fleet's epoch) the
	// counts stop being held back ([fleet.held]): those of a vouching
	// replica's calls after its own probes succeeded, which belong to
	// the generation their success closes, not to the half-open one;
	// began is when it was made, before them all. Set before the tally is
	// published, never changed.
	heldUntil int64
	began     time.Time
}

const (
	oneRequest = 1 << 32
	lowHalf    = 1<<32 - 1
)

// tallyOf returns an empty tally of generation gen.
func tallyOf(gen uint64) *tally {
	c := &tally{}
	c.gen.Store(gen)
	return c
}

// drain moves the counts of calls into the flusher's own.
func (c *tally) drain() {
	v := c.counts.Swap(0)
	c.requests += v >> 32
	c.failures += v & lowHalf
}

// fleet is the shared side of a Breaker.
type fleet struct {
	b        *Breaker
	store    SharedStore
	policy   FleetPolicy
	every    time.Duration // the flush interval, and the store's timeout
	epoch    time.Time     // for confirmed, on the monotonic clock
	counts   atomic.Pointer[tally]
	state    atomic.Uint32 // the fleet's State, as last heard from the store
	gen      atomic.Uint64
	heard    atomic.Int64  // when the store last spoke, in ns since epoch
	stale    time.Duration // how long an open or half-open state holds unconfirmed
	since    atomic.Int64  // when this replica first heard gen not closed, in ns since epoch
	permits  atomic.Int64  // probes granted to this replica for gen, not yet run
	granted  atomic.Int64  // when the permit was granted, in ns since epoch
	used     atomic.Int64  // permits taken by calls, ever
	running  atomic.Int64  // probes of this replica running
	probeAt  atomic.Int64  // when the last of them was let through, in ns since epoch
	demand   atomic.Int64  // when a call last wanted to probe and had no permit, in ns since epoch; reset by a grant
	wanted   atomic.Int64  // the same, not reset: a call that comes long after asks at once
	probeOK  atomic.Uint32
	probeBad atomic.Uint32 // outcomes of probes for gen, not yet sent
	down     atomic.Bool   // the last flush failed
	alone    atomic.Bool   // the fleet's state is unconfirmed: deciding locally
	// aloneRun: how many times this replica began to decide locally (the
	// upper half), and the successes of calls admitted since, up to
	// HalfOpenRequests (the lower half): one word, so that a success is
	// never counted in a period begun after its call was admitted.
	aloneRun  atomic.Uint64
	aloneIn   atomic.Uint64 // the generation it last began to decide locally in
	ownProbes atomic.Int64  // outcomes of calls a vouching replica may still report as the fleet's probes
	vouch     atomic.Uint64 // 1 + the generation whose opening this replica's own calls outlived (vouched)
	greeted   atomic.Bool   // the first flush has ended, or a call waited for it long enough

	kick             chan struct{} // asks the flusher for a flush now (buffered 1)
	fmu              sync.Mutex
	fstarted, fended uint64        // flushes started and ended, under fmu
	fdone            chan struct{} // closed as the flush under way ends, under fmu

	mu      sync.Mutex // taken by apply: the flusher's and the watcher's answers
	watched uint64     // answers applied from the watcher, under mu

	// Only the flusher's goroutine uses these.
	id          string // this replica's, for batch names
	seq         uint64
	pending     *Sync     // the batch not yet acknowledged
	formed      time.Time // when pending was formed
	pendingFrom time.Time // when the counts of pending began
	drained     time.Time // when the last flush drained the counts
	sent        int64     // when the last flush was sent, in ns since epoch
	lastErr     error     // of the last flush

	life     context.Context // every store call's; canceled when Close's time is up
	end      context.CancelFunc
	bound    *time.Timer  // ends life at Close's bound
	closeBy  atomic.Int64 // Close's bound, in ns since epoch; 0 before Close
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	watching sync.WaitGroup
	unwatch  context.CancelFunc
}

func (b *Breaker) startFleet() {
	c := &b.cfg
	if c.rate == 0 || c.window == 0 {
		panic(fmt.Sprintf("breaker: New(%q): Shared needs FailureRate and a Window: the fleet shares a failure rate over a window", b.Name()))
	}
	f := &fleet{
		b:     b,
		store: c.shared,
		every: c.flush,
		epoch: time.Now(),
		// A confirmed state is at most a flush interval old when it is
		// confirmed again; a flush lost to a slow store may take all of
		// its interval (its deadline) before the next one confirms it:
		// allow three, so that one lost flush does not let calls through
		// to a dependency the fleet holds open.
		stale: max(c.openTimeout, 3*c.flush),
		policy: FleetPolicy{
			Rate: c.rate, MinRequests: c.rateMin, Window: c.window, Buckets: c.buckets,
			OpenTimeout: c.openTimeout, HalfOpenRequests: c.halfOpenRequests,
			// A running probe's replica renews its grant at each flush.
			ProbeTimeout:  max(c.openTimeout, 3*c.flush),
			FlushInterval: c.flush,
		},
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		kick:  make(chan struct{}, 1),
		fdone: make(chan struct{}),
		id:    rand.Text(),
	}
	first := &tally{}
	first.unknown.Store(true)
	f.counts.Store(first)
	f.demand.Store(math.MinInt64 / 2)
	f.wanted.Store(math.MinInt64 / 2)
	f.life, f.end = context.WithCancel(context.Background())
	b.fleet = f
	b.resend.writing = make(chan struct{}, 1)
	go f.run()
	if w, ok := f.store.(SharedWatcher); ok {
		ctx, cancel := context.WithCancel(f.life)
		f.unwatch = cancel
		f.watching.Go(func() { f.watch(ctx, w) })
	}
}

// watch takes the changes of state the store sends as they happen.
func (f *fleet) watch(ctx context.Context, w SharedWatcher) {
	for ctx.Err() == nil {
		_ = safelyDo(ctx, f.life.Done(), "Watch", func() error { // a failure shows in the flushes
			return w.Watch(ctx, f.b.Name(), func(got Fleet) { f.apply(got, true, 0, 0, false, false) })
		})
		select {
		case <-ctx.Done():
		case <-time.After(f.every):
		}
	}
}

// Close stops a shared breaker's flusher after a last flush of its counts,
// and waits for it: at most one flush interval for a flush under way and
// one more for the last ones, whatever the store does. It returns the last
// flush's error: the counts it could not send are lost. It is a no-op for
// a breaker that is not shared, and safe to call more than once.
func (b *Breaker) Close() error {
	if b == nil || b.fleet == nil {
		return nil
	}
	f := b.fleet
	f.stopOnce.Do(func() {
		if f.unwatch != nil {
			f.unwatch()
		}
		f.closeBy.Store(int64(time.Since(f.epoch) + 2*f.every))
		close(f.stop)
		f.bound = time.AfterFunc(2*f.every, f.end) // whatever the store does
	})
	<-f.done
	f.watching.Wait() // a Watch that returns as its context ends, or Close's bound
	f.bound.Stop()
	f.end()
	return f.lastErr
}

func (f *fleet) run() {
	defer close(f.done)
	// One flush per interval, start to start, whatever happens: a probe's
	// end waits for the next one. The fleet turns half-open OpenTimeout
	// after this replica heard of its opening: a replica whose calls
	// wanted to probe within two intervals of that moment (by the flush
	// before it) postpones the flush due less than an interval before the
	// moment to the moment itself (one gap under two intervals), so it is
	// granted the probe at once, and never flushes sooner than an interval
	// after the last.
	// A first flush at once, with no counts (the calls of the first
	// instants wait for the next): a replica made while the fleet is open
	// learns it within a round trip, not an interval, and the intervals
	// keep their schedule.
	t := time.NewTimer(f.every)
	defer t.Stop()
	f.flush(true)
	f.greeted.Store(true)
	var armed int64      // the opening halfAt is set for: since
	var halfAt time.Time // when the fleet turns half-open; zero if none
	for {
		select {
		case <-t.C:
			if since := f.since.Load(); since != armed && resilience.State(f.state.Load()) == resilience.StateOpen {
				armed = since
				halfAt = f.epoch.Add(time.Duration(since) + f.policy.OpenTimeout)
			}
			now := time.Now()
			if !halfAt.IsZero() && halfAt.After(now) && halfAt.Sub(now) < f.every &&
				halfAt.Sub(f.epoch)-time.Duration(f.demand.Load()) < 2*f.every {
				t.Reset(halfAt.Sub(now)) // postponed to the half-open moment
				halfAt = time.Time{}
				continue
			}
			if !halfAt.IsZero() && !halfAt.After(now) {
				halfAt = time.Time{}
			}
			f.flush(false)
			t.Reset(max(f.every-time.Since(now), 0))
		case <-f.kick: // a call waits for a probe (admit): the periodic flushes go on as they were
			f.flush(false)
		case <-f.stop:
			// A last flush, and a few more while counts are left behind
			// it, within Close's time.
			for range 3 {
				f.flush(false)
				if f.lastErr != nil || f.life.Err() != nil || (f.pending == nil && f.left() == 0) {
					break
				}
			}
			return
		}
	}
}

// left returns how many outcomes wait for a batch.
func (f *fleet) left() uint64 {
	c := f.counts.Load()
	c.drain()
	return c.requests + c.failures + uint64(f.probeOK.Load()) + uint64(f.probeBad.Load())
}

// flush sends the batch of counts and takes the fleet's state: once per
// flush interval, whatever the traffic. A batch is sent again until the
// store acknowledges it (the store applies a batch once), but for one of
// an unknown generation (see [Sync]); the counts of
// the calls meanwhile wait for the next one. A batch older than the
// window is dropped (its counts are outside it), and so is one of a
// generation that the replica has heard is over (the store would drop it).
// The first flush, at once as the replica starts (hello), sends no counts
// and leaves the forced mode to the next: it learns the fleet's state. A
// store back from an older snapshot may hold a forced open revoked since,
// which the other replicas write back at their next flush (review12).
// Its fleet state is taken: a replica started during an outage (a crash
// loop, an autoscaler) does not send its first calls to a dependency the
// fleet holds open (review139: 16 calls in its first interval).
func (f *fleet) flush(hello bool) {
	f.fmu.Lock()
	f.fstarted++
	seq := f.fstarted
	f.fmu.Unlock()
	defer func() {
		f.fmu.Lock()
		f.fended = seq
		close(f.fdone)
		f.fdone = make(chan struct{})
		f.fmu.Unlock()
	}()
	c := f.counts.Load()
	if c.requests == 0 { // those drained now were made after the last drain, and after c began
		c.from = f.drained
		if c.from.Before(c.began) {
			c.from = c.began
		}
		if c.from.IsZero() {
			c.from = f.epoch
		}
	}
	hold := f.held(c)
	if !hello && !hold {
		c.drain()
		f.drained = time.Now()
	}
	oldest := f.policy.Window
	if c.heldUntil != 0 {
		oldest += 3 * f.every // held back on purpose (fleet.held)
	}
	if c.requests > 0 && time.Since(c.from) > oldest {
		// Gathered while flushes failed, for longer than the window: the
		// oldest are outside it, and of a state the fleet may have left
		// (a store restarted from an older snapshot may even hold their
		// generation again). Dropped, not sent.
		c.requests, c.failures = 0, 0
	}
	if f.pending != nil && (time.Since(f.formed) > f.policy.Window || (!f.pending.GenerationUnknown && f.pending.Generation != f.gen.Load())) {
		f.pending = nil
	}
	if f.pending == nil {
		s := &Sync{Generation: c.gen.Load(), GenerationUnknown: c.unknown.Load()}
		if !hold {
			s.Requests, s.Failures = c.requests, c.failures
			c.requests, c.failures = 0, 0
		}
		if s.Generation == f.gen.Load() {
			s.ProbeSuccesses, s.ProbeFailures = f.probeOK.Swap(0), f.probeBad.Swap(0)
		}
		if *s != (Sync{Generation: s.Generation}) { // something to apply once
			f.seq++
			s.Batch = f.id + "-" + strconv.FormatUint(f.seq, 10)
		}
		f.pending, f.formed, f.pendingFrom = s, time.Now(), c.from
	}
	s := *f.pending
	if s.GenerationUnknown && !f.pendingFrom.IsZero() {
		s.CountsAge = max(time.Since(f.pendingFrom), time.Millisecond)
	}
	now := int64(time.Since(f.epoch))
	// A permit no call used within a flush interval is given up, so that
	// an idle replica does not keep the fleet's probe from the others.
	if f.permits.Load() > 0 && time.Duration(now-f.granted.Load()) > f.every {
		f.permits.Store(0)
	}
	// What the store restores if it lost its state: only what this
	// replica has confirmed recently, as opened when it knew, and goes by
	// (view: not an opening its own calls outlived).
	s.State = f.view()
	if s.State != resilience.StateClosed {
		s.OpenedFor = time.Duration(now - f.since.Load())
		if s.State == resilience.StateHalfOpen {
			s.OpenedFor = max(s.OpenedFor, f.policy.OpenTimeout)
		}
	}
	s.Replica = f.id
	// Asked while open too, so that the flush that finds the fleet
	// half-open grants the probe: only by a replica whose calls wanted one
	// in the last two intervals (an idle replica asks for none).
	own := resilience.State(f.b.state.Load())
	s.WantProbe = resilience.State(f.state.Load()) != resilience.StateClosed && f.permits.Load() <= 0 && own != resilience.StateOpen &&
		time.Duration(now-f.demand.Load()) < 2*f.every
	s.OwnHalfOpen = own == resilience.StateHalfOpen
	// In this order: a permit a call takes meanwhile shows as held or as
	// running, and a grant in the answer is not taken for a new one.
	used := f.used.Load()
	s.ProbeHeld = f.permits.Load() > 0
	s.ProbeRunning = f.probing()
	s.Policy = f.policy
	f.mu.Lock()
	watched := f.watched
	f.mu.Unlock()
	// A deadline, not only a cancellation: a client reading from a frozen
	// server may heed only the deadline. One for the whole flush, the
	// forced mode's reads and writes after the Sync included, so that a
	// flush lasts an interval at most and Close waits two at most
	// (review111: each had an interval of its own).
	deadline := time.Now().Add(f.every)
	if by := f.closeBy.Load(); by != 0 {
		if by := f.epoch.Add(time.Duration(by)); by.Before(deadline) {
			deadline = by
		}
	}
	ctx, cancel := context.WithDeadline(f.life, deadline)
	f.sent = int64(time.Since(f.epoch))
	got, err := safely(ctx, f.life.Done(), "Sync", func() (Fleet, error) { return f.store.Sync(ctx, f.b.Name(), s) })
	cancel()
	f.lastErr = err
	if err != nil {
		// A batch of an unknown generation that may have reached the
		// store (its answer lost) is not sent again: a store that lost its
		// record of it since (restarted empty, or from a snapshot taken
		// before it) would count it twice, and no generation tells it
		// apart. Its counts are lost if it never did.
		if s.GenerationUnknown {
			f.pending = nil
		}
		f.goAlone(&f.down, &f.alone, err)
		return
	}
	f.pending = nil
	rejoin := f.cutOff() // not a vouch: it is set once
	if f.down.Swap(false) {
		f.b.emit(resilience.Event{Kind: resilience.EventSharedStateRestored, Name: f.b.Name()})
	}
	f.apply(got, false, watched, used, s.ProbeRunning, rejoin)
	if !hello {
		f.b.resendForcing(deadline)
		f.b.takeForcing(got.ForceVersion, deadline)
	}
}

// storeGrace is how long after its context ends a call of the shared
// store's is waited for before it is given up ([safely]).
const storeGrace = 100 * time.Millisecond

// safely makes call, one call of the shared store's method what, on a
// goroutine of its own, and returns its answer; or its panic, or its
// runtime.Goexit, as its error; or, if it has not returned storeGrace
// after ctx ended, or when stop is closed after that (Close's bound),
// that as its error, leaving it to return when it will. A store's fault
// is no reason to stop the replica's calls, which go by their own breaker
// meanwhile, as with a store that fails, nor to end the process, the
// flusher or the watcher, nor to keep Close or SetMode waiting.
func safely[T any](ctx context.Context, stop <-chan struct{}, what string, call func() (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			var zero T
			if r := recover(); r != nil {
				done <- answer{zero, fmt.Errorf("breaker: the shared store's %s panicked: %v", what, r)}
			} else {
				done <- answer{zero, fmt.Errorf("breaker: the shared store's %s called runtime.Goexit", what)}
			}
		}()
		v, err := call()
		returned = true
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(storeGrace)
	defer grace.Stop()
	select {
	case a := <-done:
		return a.v, a.err
	case <-grace.C:
	case <-stop:
	}
	var zero T
	return zero, fmt.Errorf("breaker: the shared store's %s had not returned %v after its context ended: %w", what, storeGrace, context.Cause(ctx))
}

// safelyDo is [safely] for a method that returns only an error.
func safelyDo(ctx context.Context, stop <-chan struct{}, what string, call func() error) error {
	_, err := safely(ctx, stop, what, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// apply takes the store's answer: a flush's (watched: how many of the
// watcher's answers had been applied when it was sent, used: how many
// permits calls had taken, running: whether it said a probe ran, rejoin:
// whether the replica decided alone when it was sent), or a change the
// watcher heard.
func (f *fleet) apply(got Fleet, fromWatch bool, watched uint64, used int64, running, rejoin bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vouchedNow := false
	if rejoin && got.State != resilience.StateClosed && got.Generation == f.gen.Load() &&
		got.Generation == f.aloneIn.Load() && resilience.State(f.state.Load()) != resilience.StateClosed &&
		f.aloneRun.Load()&lowHalf >= uint64(f.policy.HalfOpenRequests) &&
		resilience.State(f.b.state.Load()) == resilience.StateClosed {
		// The store answers again with the opening this replica's own
		// calls outlived while it decided alone, its own breaker closed:
		// the replica goes on deciding alone until the fleet changes
		// state, its calls' outcomes the fleet's probes (ownProbe). A
		// stale opening is no reason to refuse the calls of a dependency
		// that answers.
		// Its own probes only as the vouch begins: not again at each
		// flush that follows a lost one (review148).
		vouchedNow = f.vouch.Swap(got.Generation+1) != got.Generation+1
	}
	// An opening heard while the flushes fail: the one the replica decides
	// alone in, if it goes on (review146), from after the state is taken
	// below.
	aloneAnew := fromWatch && f.cutOff() && got.Generation > f.gen.Load()
	if fromWatch && got.Generation <= f.gen.Load() {
		// Heard already: it confirms nothing that a flush could not (a
		// watcher that repeats an opening while every flush fails would
		// keep the replica going by it).
		return
	}
	f.heard.Store(int64(time.Since(f.epoch)))
	f.alone.Store(false)
	if fromWatch {
		f.watched++
		// Counts of an unknown generation made so far began before this
		// change: they belong to the generation it ended. A store drops
		// such counts by their age, but one restarted empty since cannot
		// tell; the replica drops them.
		if c := f.counts.Load(); c.unknown.Load() {
			f.counts.Store(tallyOf(got.Generation))
		}
	} else if f.watched != watched && got.Generation < f.gen.Load() {
		return // the watcher heard of a later change while the flush ran
	}
	if c := f.counts.Load(); c.unknown.Load() && !fromWatch {
		// The first answer of a flush: the counts made so far are the
		// fleet's current generation's, unless they began before its last
		// change (the answer says when; the flusher's own fields).
		if got.ChangedFor > 0 && c.from.Before(time.Now().Add(-got.ChangedFor)) {
			f.counts.Store(tallyOf(got.Generation))
		} else {
			c.gen.Store(got.Generation)
			c.unknown.Store(false)
		}
	}
	wasClosed := resilience.State(f.state.Load()) == resilience.StateClosed
	if c := f.counts.Load(); c.heldUntil != 0 && int64(time.Since(f.epoch)) < c.heldUntil && got.State == resilience.StateClosed &&
		got.Previous != 0 && got.Previous == c.gen.Load() && got.Generation != got.Previous {
		// The generation the probes closed, not a later one the replica
		// heard of first (review153: an outage's failures, held while
		// its flushes failed, reopened a fleet that had recovered since);
		// before the replica's own: never sent under the half-open one.
		c.gen.Store(got.Generation)
	}
	old := f.gen.Swap(got.Generation)
	// Counts of another generation are void. But held counts, for a
	// closing heard by Watch, which does not say which generation it
	// ended: the flush's answer does, and a held tally that answer did not
	// relabel is dropped, or every count would go out under a generation
	// that is over (review157).
	if c := f.counts.Load(); c.gen.Load() != got.Generation && !c.unknown.Load() &&
		!(fromWatch && got.State == resilience.StateClosed && c.heldUntil != 0 && c.gen.Load() == old) {
		f.counts.Store(tallyOf(got.Generation))
	}
	if old != got.Generation {
		// Grants and probe outcomes of another generation are void.
		f.permits.Store(0)
		f.probeOK.Store(0)
		f.probeBad.Store(0)
		f.ownProbes.Store(0)
	}
	switch {
	case got.State == resilience.StateClosed:
	case !fromWatch && got.ChangedFor > 0:
		// The store's word for when the fleet opened: a store that lost
		// its state and took it back under a new generation keeps the
		// opening's time, so that a crash loop does not move the open
		// timer on at each restart.
		f.since.Store(int64(time.Since(f.epoch) - got.ChangedFor))
	case old != got.Generation || wasClosed:
		f.since.Store(int64(time.Since(f.epoch)))
	}
	switch {
	case fromWatch:
	case !got.ProbeGranted:
		// The store holds no grant of this replica's (it expired, or was
		// given up): nor does the replica.
		f.permits.Store(0)
	case f.permits.Load() <= 0 && !running && !f.probing() && f.used.Load() == used:
		// A grant, new or given back: one permit, for a flush interval
		// from when the flush was sent (before the store's grant expires).
		// If a call took a permit since the flush was sent, the grant is
		// the one it runs on; if the flush said a probe ran, the grant is
		// that probe's, renewed, though it may have ended since (review91:
		// a second probe in the generation, its first's failure not yet
		// told).
		f.demand.Store(math.MinInt64 / 2)
		f.granted.Store(f.sent)
		f.permits.Store(1)
	}
	from := resilience.State(f.state.Swap(uint32(got.State)))
	if aloneAnew {
		// After the state: a call that reads the new count of going alone
		// (admitting, before the state) finds the opening and is refused;
		// one that counted under the old one does not vouch (review148).
		f.aloneIn.Store(got.Generation)
		f.anew()
	}
	if got.State == resilience.StateHalfOpen && (from != got.State || vouchedNow) && f.vouched() {
		f.ownProbes.Store(int64(f.policy.HalfOpenRequests))
	}
	if from != got.State {
		f.b.fleetChanged(from, got.State)
	}
}

// view returns the fleet's state as this replica goes by it: [fleet.heardState],
// or closed while the replica vouches for the dependency in the fleet's
// current opening ([fleet.vouched]) and its own breaker is not open.
func (f *fleet) view() resilience.State {
	st := f.heardState()
	if st == resilience.StateClosed || !f.vouched() || resilience.State(f.b.state.Load()) == resilience.StateOpen {
		return st // the vouch stands on the replica's own breaker, not open
	}
	return resilience.StateClosed
}

// vouched reports whether this replica decides alone in the fleet's
// current generation, open or half-open: it decided alone while the store
// did not answer, its own calls succeeded then, at least HalfOpenRequests
// of them, and its own breaker was closed when the store answered again,
// still in the opening it had heard of.
func (f *fleet) vouched() bool { return f.vouch.Load() == f.gen.Load()+1 }

// heardState returns the fleet's state as last heard from the store, or
// closed if the store has not confirmed an open or half-open state for
// longer than the open timeout, or three flush intervals if longer (the
// replica decides alone until the store answers again).
func (f *fleet) heardState() resilience.State {
	st := resilience.State(f.state.Load())
	if st == resilience.StateClosed {
		return st
	}
	if time.Duration(int64(time.Since(f.epoch))-f.heard.Load()) > f.stale {
		f.goAlone(&f.alone, &f.down, ErrFleetUnconfirmed)
		return resilience.StateClosed
	}
	return st
}

// goAlone sets flag, one of the two reasons this replica decides alone
// (down, alone), and, if it was not set, says so with err; the replica's
// own breaker forgets its window if the other reason was not set either
// (core.forget, under whose lock the flag is set).
func (f *fleet) goAlone(flag, other *atomic.Bool, err error) {
	if flag.Load() {
		return
	}
	was := true
	f.b.cb.forget(func() bool {
		was = flag.Swap(true)
		if was || other.Load() || f.vouched() {
			return false
		}
		f.aloneIn.Store(f.gen.Load())
		f.anew()
		return true
	})
	if !was {
		f.b.emit(resilience.Event{Kind: resilience.EventSharedStateUnavailable, Name: f.b.Name(), Err: err})
	}
}

// local reports whether this replica decides alone: its store fails, or
// has not confirmed the fleet's state for too long, or it vouches for the
// dependency in the fleet's opening ([fleet.vouched]). Its own breaker then
// applies the failure rate to its own calls, counted since it went alone
// (core.forget, which sets the flags) but for the run of failures or
// successes before.
func (f *fleet) local() bool { return f.cutOff() || f.vouched() }

// cutOff reports whether this replica's store fails, or has not confirmed
// the fleet's state for too long (down, alone).
func (f *fleet) cutOff() bool { return f.down.Load() || f.alone.Load() }

// admit decides a call by the fleet's state: nil to go on (probe: it is a
// fleet probe, for generation gen; otherwise gen is, if the replica decides
// alone, how many times it began to, for record), or the rejection; c is
// where its outcome counts. A replica whose own breaker is open does not probe for
// the fleet: it cannot tell the fleet's dependency is back; its own
// breaker turns half-open on its own timer, and then it may.
func (f *fleet) admit(ctx context.Context) (probe bool, gen uint64, c *tally, err error) {
	return f.admitting(ctx, true)
}

// admitting is admit; a call may ask for the fleet's probe at once if
// rare.
func (f *fleet) admitting(ctx context.Context, rare bool) (probe bool, gen uint64, c *tally, err error) {
	if !f.greeted.Load() {
		f.greet(ctx)
	}
	c = f.counts.Load()
	var run uint64 // of deciding alone, read before the state (apply's order)
	if f.cutOff() {
		run = f.aloneRun.Load() >> 32
	}
	switch f.view() {
	case resilience.StateOpen:
		if !f.b.ownOpen() {
			f.wantProbe()
		}
		return false, 0, nil, f.b.reject(f.b.errOpen)
	case resilience.StateHalfOpen:
		if f.b.ownOpen() {
			return false, 0, nil, f.b.reject(f.b.errOpen)
		}
		if f.permits.Load() <= 0 {
			// Asked for at the next flush; by a call that comes more than
			// two flush intervals after the last that wanted one, at once:
			// where calls come less often than flushes, a permit granted
			// at the next would lapse before the next call came, and the
			// fleet stay half-open, every call rejected.
			last := f.wanted.Load()
			now := int64(time.Since(f.epoch))
			// One call asks at once, of those that find the last long ago
			// together: the others are rejected at once.
			if !rare || time.Duration(now-last) <= 2*f.every || !f.wanted.CompareAndSwap(last, now) {
				f.wantProbe()
				return false, 0, nil, f.b.reject(f.b.errBusy)
			}
			f.demand.Store(now) // for the flush it asks for
			switch {
			case f.flushNow(ctx):
				probe, gen, c, err = f.admitting(ctx, false) // as the flush left it
			case ctx.Err() != nil:
				// The caller gave up, the breaker refused nothing; the
				// flush it asked for, if still to start (the flusher was
				// busy), asks for the probe, for the next call.
				return false, 0, nil, ctx.Err()
			default:
				err = f.b.reject(f.b.errBusy)
			}
			if err != nil {
				// Not granted (another replica holds the probe): the next
				// periodic flush is not to ask for one, which would lapse
				// before this replica's next call; that call asks again.
				// Two replicas calling in turn otherwise each took the
				// grant the other's call then found held.
				f.demand.Store(math.MinInt64 / 2)
			}
			return probe, gen, c, err
		}
		if gen, ok := f.takePermit(); ok {
			return true, gen, c, nil
		}
		f.wantProbe()
		return false, 0, nil, f.b.reject(f.b.errBusy)
	}
	return false, run, c, nil // for record: admitted while deciding alone
}

// anew begins a period of deciding alone: a new number, no success yet
// (fleet.aloneRun).
func (f *fleet) anew() {
	for {
		v := f.aloneRun.Load()
		if f.aloneRun.CompareAndSwap(v, (v>>32+1)<<32) {
			return
		}
	}
}

// okAlone counts the success of a call admitted in period run of deciding
// alone, if it is still the current one, up to HalfOpenRequests.
func (f *fleet) okAlone(run uint64) {
	enough := uint64(f.policy.HalfOpenRequests) // at least 1 (the option's bound)
	for {
		v := f.aloneRun.Load()
		if v>>32 != run || v&lowHalf >= enough || f.aloneRun.CompareAndSwap(v, v+1) {
			return
		}
	}
}

// ownProbe reports the outcome of a vouching replica's call, made in the
// fleet's half-open generation, as one of the fleet's probes, if it may
// report more ([fleet.vouched]): its calls reach the dependency whether
// or not the store grants it a probe, and calls rarer than its flushes
// would let every grant lapse (review146).
func (f *fleet) ownProbe(c *tally, bad bool) {
	f.mu.Lock() // as in record
	defer f.mu.Unlock()
	if !f.vouched() || c.unknown.Load() || c.gen.Load() != f.gen.Load() ||
		resilience.State(f.state.Load()) != resilience.StateHalfOpen || f.ownProbes.Load() <= 0 {
		return
	}
	if f.ownProbes.Add(-1) == 0 && f.counts.Load() == c {
		// The calls from now on come after the replica's probes: if they
		// succeeded, the generation they close is the one these calls
		// count in (review153: the fleet's dependency failing again just
		// after a vouching replica's probe, its failures were dropped with
		// the half-open generation, and the fleet stayed closed while
		// every replica's own breaker refused its calls). If one failed,
		// the fleet opens and they are dropped, as any of an opening.
		next := tallyOf(c.gen.Load())
		next.heldUntil, next.began = int64(time.Since(f.epoch)+3*f.every), time.Now()
		f.counts.Store(next)
	}
	if bad {
		f.probeBad.Add(1)
	} else {
		f.probeOK.Add(1)
	}
}

// held reports whether c's counts wait for the fleet to leave the
// generation they were made in, half-open as they began (tally.heldUntil):
// a store drops counts of a generation not closed, and the replica those
// of a generation that has ended. Three flush intervals at most, should
// the store never hear the probes' outcome.
func (f *fleet) held(c *tally) bool {
	if c.heldUntil == 0 || int64(time.Since(f.epoch)) >= c.heldUntil {
		return false
	}
	// Until the generation they count in is known: the closing's, once
	// relabelled; kept for a flush's answer after a closing heard by
	// Watch (review157: sent before it, under the half-open generation).
	return c.gen.Load() != f.gen.Load() || resilience.State(f.state.Load()) != resilience.StateClosed
}

// takePermit takes one of the probe permits the store granted this
// replica, for generation gen, if the fleet is still half-open.
func (f *fleet) takePermit() (gen uint64, ok bool) {
	// Under apply's lock: the state and generation it was granted in are
	// the ones the probe runs for (a newer opening heard meanwhile takes
	// it back). Running before the permit is taken, so that a flush that
	// sees no permit held sees the probe running.
	f.mu.Lock()
	defer f.mu.Unlock()
	gen = f.gen.Load()
	f.running.Add(1)
	if resilience.State(f.state.Load()) != resilience.StateHalfOpen || f.permits.Add(-1) < 0 {
		if resilience.State(f.state.Load()) == resilience.StateHalfOpen {
			f.permits.Add(1)
		}
		f.running.Add(-1)
		return 0, false
	}
	f.used.Add(1)
	f.probeAt.Store(int64(time.Since(f.epoch)))
	return gen, true
}

// flushNow has the flusher flush at once, asking for the probe that a
// call wants, and waits for it, bounded by ctx and by two flush intervals
// (a flush under way, then this one, each bounded by an interval). It
// reports whether the flush ended.
func (f *fleet) flushNow(ctx context.Context) bool {
	f.fmu.Lock()
	after := f.fstarted + 1 // a flush that starts from now sends the demand
	f.fmu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default: // one is asked for already
	}
	return f.waitFlush(ctx, after, 2*f.every)
}

// helloWait: a call that comes before the replica's first flush (its
// hello, see run) has answered waits for it, a round trip, for at most a
// helloWait-th of a flush interval (10 ms by default) and of the time it
// has left, then goes by its own breaker, and so do the calls after it,
// at once: a store that hangs as the breaker is made (a breaker group's
// first call to a host) holds up its first calls that long.
const helloWait = 10

// greet waits for the replica's first flush (its hello) to answer, a
// helloWait-th of a flush interval at most, and of the time ctx has left:
// the wait takes no call's deadline, and a call whose caller hangs up
// meanwhile goes on to find it. A call that waited the whole bound has
// the calls after it go at once.
func (f *fleet) greet(ctx context.Context) {
	d := f.every / helloWait
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline)/helloWait < d {
		f.waitFlush(ctx, 1, time.Until(deadline)/helloWait)
		return
	}
	if !f.waitFlush(ctx, 1, d) && ctx.Err() == nil {
		f.greeted.Store(true)
	}
}

// waitFlush waits for flush number n (counted from 1) to end, bounded by
// ctx and by d, and reports whether it did.
func (f *fleet) waitFlush(ctx context.Context, n uint64, d time.Duration) bool {
	bound := time.NewTimer(d)
	defer bound.Stop()
	for {
		f.fmu.Lock()
		ended, done := f.fended, f.fdone
		f.fmu.Unlock()
		if ended >= n {
			return true
		}
		select {
		case <-done:
		case <-ctx.Done():
			return false
		case <-bound.C:
			return false
		case <-f.done: // closed
			return false
		}
	}
}

// probing reports whether a probe of this replica's runs for the fleet,
// and has not been out as long as the local breaker lets a probe be
// before another goes (core.overdueAfter): an overdue probe neither
// renews the replica's grant, which then goes to whichever replica wants
// one (this one too), nor keeps a grant from being taken as new, so that
// a probe that never answers does not hold the fleet half-open for ever.
func (f *fleet) probing() bool {
	return f.running.Load() > 0 && time.Duration(int64(time.Since(f.epoch))-f.probeAt.Load()) <= f.b.cb.overdueAfter()
}

// wantProbe notes that a call wanted to probe for the fleet.
func (f *fleet) wantProbe() {
	now := int64(time.Since(f.epoch))
	f.demand.Store(now)
	f.wanted.Store(now)
}

// ownOpen reports whether this replica's own breaker is open, moving it to
// half-open first if its open timeout has passed.
func (b *Breaker) ownOpen() bool {
	if resilience.State(b.state.Load()) != resilience.StateOpen {
		return false
	}
	return b.cb.State() == resilience.StateOpen
}

// record counts a call's outcome for the fleet, in the tally of the
// generation it was admitted under; a probe's outcome for the generation it
// was granted in, or not at all.
func (f *fleet) record(probe bool, gen uint64, c *tally, o outcome) {
	if probe {
		f.running.Add(-1)
	}
	switch o {
	case excluded:
		if probe {
			f.mu.Lock() // as below
			if gen == f.gen.Load() {
				f.permits.Add(1) // not a verdict: let another call probe
			}
			f.mu.Unlock()
		}
		return
	case failed:
		c.counts.Add(oneRequest + 1) // the request and its failure at once
	default:
		c.counts.Add(oneRequest)
		if !probe && gen != 0 {
			f.okAlone(gen)
		}
	}
	if !probe && f.ownProbes.Load() > 0 {
		f.ownProbe(c, o == failed)
	}
	if probe {
		// Under apply's lock: a probe's outcome counts for the generation
		// it ran in, never for the next one. Reported at the next flush
		// (one flush per interval, whatever happens).
		f.mu.Lock()
		if gen == f.gen.Load() {
			if o == failed {
				f.probeBad.Add(1)
			} else {
				f.probeOK.Add(1)
			}
		}
		f.mu.Unlock()
	}
}

// executeShared is Execute for a shared breaker: the fleet's gate, then
// this replica's breaker.
func (b *Breaker) executeShared(ctx context.Context, op func(ctx context.Context) error) error {
	f := b.fleet
	probe, gen, c, err := f.admit(ctx)
	if err != nil {
		return err
	}
	out := excluded // a panic or runtime.Goexit unless op returns
	ran := false
	defer func() {
		switch {
		case ran:
			f.record(probe, gen, c, out)
		case probe:
			f.running.Add(-1)
			f.mu.Lock() // as in record
			if gen == f.gen.Load() {
				f.permits.Add(1) // this replica's breaker rejected it
			}
			f.mu.Unlock()
		}
	}()
	out, err = b.executeOn(ctx, func(ctx context.Context) error {
		ran = true
		return op(ctx)
	})
	return err
}

// FleetState returns the fleet breaker's state as this replica goes by it
// (see [Shared]): as last heard from its store, or closed when the store
// has not confirmed it for longer than [OpenTimeout], or three flush
// intervals if that is longer, or while this replica's own calls
// outlived the opening the store holds. It is closed for a
// breaker that is not shared. It does no I/O, and takes no lock but once,
// as it finds the fleet's state unconfirmed (the replica then begins to
// decide alone, under its breaker's lock).
func (b *Breaker) FleetState() resilience.State {
	if b == nil || b.fleet == nil {
		return resilience.StateClosed
	}
	return b.fleet.view()
}

// Fleet asks the store of a shared breaker for the fleet's state and its
// totals in the window, for dashboards and tests. It returns an error if
// the breaker is not shared or its store cannot tell ([SharedReader]).
func (b *Breaker) Fleet(ctx context.Context) (FleetStatus, error) {
	if b == nil || b.fleet == nil {
		return FleetStatus{}, errors.New("breaker: not shared")
	}
	r, ok := b.fleet.store.(SharedReader)
	if !ok {
		return FleetStatus{}, errors.New("breaker: the shared store cannot read the fleet's totals")
	}
	return safely(ctx, b.fleet.life.Done(), "Read", func() (FleetStatus, error) { return r.Read(ctx, b.Name(), b.fleet.policy) })
}
