package breaker

import (
	"context"
	"crypto/rand"
	"fmt"
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
// ctx's deadline.
type SharedStore interface {
	// Sync adds a replica's outcomes since its last Sync to the fleet's
	// counts, records the outcome of its probes, decides from the
	// fleet-wide counts whether the fleet breaker opens or closes, and
	// returns the fleet's state; if s.WantProbe and the fleet is half-open,
	// it grants this replica one of the fleet's HalfOpenRequests probes, if
	// one is left.
	Sync(ctx context.Context, name string, s Sync) (Fleet, error)
}

// SharedWatcher is implemented by a [SharedStore] that can tell a replica
// at once when the fleet breaker changes state, so that it flushes then
// rather than at its next tick. Watch calls changed on each change until
// ctx is done or it fails; the breaker calls it again after a flush
// interval.
type SharedWatcher interface {
	Watch(ctx context.Context, name string, changed func()) error
}

// Sync is what a replica tells its [SharedStore].
type Sync struct {
	// Batch identifies the counts below: a Sync that failed is sent again
	// with the same Batch and counts, and a store applies a Batch once, so
	// that counts whose answer was lost are not counted twice. Empty: no
	// counts.
	Batch string
	// Requests and Failures count the outcomes of the batch: calls that
	// ended, and the failures among them.
	Requests, Failures uint64
	// ProbeSuccesses and ProbeFailures count the outcomes of the probes
	// this replica ran for the fleet's half-open Generation.
	ProbeSuccesses, ProbeFailures uint32
	// Generation is the fleet's generation as this replica last saw it,
	// and State its state then; a store that lost its state (restarted
	// empty) takes them back from a replica that saw the fleet not closed.
	Generation uint64
	State      resilience.State
	// WantProbe asks for a probe, if the fleet is half-open: a call of this
	// replica is waiting to probe.
	WantProbe bool
	// ProbeRunning says a probe this replica was granted still runs: its
	// grant is kept.
	ProbeRunning bool
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
	// ProbeTimeout is how long a probe's grant lasts before another
	// replica may have it, unless the replica running the probe says it
	// still runs: the larger of OpenTimeout and three flush intervals.
	ProbeTimeout time.Duration
}

// Fleet is the fleet breaker's state as a store returns it.
type Fleet struct {
	State resilience.State
	// Generation changes with each change of state.
	Generation uint64
	// ProbeGranted grants the replica one probe call.
	ProbeGranted bool
}

// Shared makes the replicas of a service share this breaker's failure
// rate: the outcomes of calls are counted in memory (atomics, no lock, no
// I/O on the call's path) and sent to store by a background flusher every
// [FlushInterval], which gets back the fleet's state; a call is rejected if
// the fleet breaker or this replica's own is open. [FailureRate] over
// [Window] is the fleet's rule; [ConsecutiveFailures] stays each replica's
// own, so one replica cut off from the dependency opens its own breaker
// without opening the fleet's. When the fleet breaker turns half-open,
// exactly [HalfOpenRequests] probes run fleet-wide, granted by the store;
// the others are rejected at once, never kept waiting. When the store
// fails or hangs, calls go on with this replica's state at full speed,
// [resilience.EventSharedStateUnavailable] says so, and sharing resumes at
// the first flush that reaches it again
// ([resilience.EventSharedStateRestored]), counts included: the outcomes of
// the failed flushes are sent then. A shared breaker runs a goroutine:
// call [Breaker.Close] when done with it. New panics if the breaker has
// no [FailureRate] or a [Window] of 0. Default: not shared.
// docs/shared-breaker.md tells the model.
func Shared(store SharedStore) Option {
	return optionFunc(func(c *config) { c.shared = store })
}

// FlushInterval sets how often a shared breaker sends its counts and
// learns the fleet's state: how stale a replica's view of the fleet may
// be. Each flush is bounded by the interval too, and so is Close's final
// flush: keep it well above the store's round trip, or no flush gets
// through. Default 100 ms. It panics if d is not positive.
func FlushInterval(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("breaker: FlushInterval(%v): d must be more than 0", d))
	}
	return optionFunc(func(c *config) { c.flush = d })
}

// fleet is the shared side of a Breaker.
type fleet struct {
	b      *Breaker
	store  SharedStore
	policy FleetPolicy
	every  time.Duration

	requests, failures atomic.Uint64 // since the batch in flight was formed
	state              atomic.Uint32 // the fleet's State, as last synced
	gen                atomic.Uint64
	permits            atomic.Int64  // probes granted to this replica for gen, not yet run
	running            atomic.Int64  // probes of this replica running
	demand             atomic.Bool   // a call wanted to probe and had no permit
	probeOK, probeBad  atomic.Uint32 // outcomes of probes for gen, not yet sent
	down               atomic.Bool

	// Only the flusher's goroutine uses these.
	id      string // this replica's, for batch names
	seq     uint64
	pending *Sync     // the batch not yet acknowledged
	formed  time.Time // when pending was formed
	lastErr error     // of the last flush

	kick     chan struct{}
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
		policy: FleetPolicy{
			Rate: c.rate, MinRequests: c.rateMin, Window: c.window, Buckets: c.buckets,
			OpenTimeout: c.openTimeout, HalfOpenRequests: c.halfOpenRequests,
			// A running probe's replica renews its grant at each flush.
			ProbeTimeout: max(c.openTimeout, 3*c.flush),
		},
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		id:   rand.Text(),
	}
	b.fleet = f
	go f.run()
	if w, ok := f.store.(SharedWatcher); ok {
		ctx, cancel := context.WithCancel(context.Background())
		f.unwatch = cancel
		f.watching.Go(func() { f.watch(ctx, w) })
	}
}

// watch flushes as soon as the store says the fleet changed state.
func (f *fleet) watch(ctx context.Context, w SharedWatcher) {
	for ctx.Err() == nil {
		_ = w.Watch(ctx, f.b.Name(), f.flushNow) // a failure shows in the flushes
		select {
		case <-ctx.Done():
		case <-time.After(f.every):
		}
	}
}

// flushNow asks the flusher for a flush now.
func (f *fleet) flushNow() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Close stops a shared breaker's flusher after a last flush of its counts
// (bounded by the flush interval), and waits for it. It returns the last
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
		f.watching.Wait()
		close(f.stop)
	})
	<-f.done
	return f.lastErr
}

func (f *fleet) run() {
	defer close(f.done)
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-f.kick:
		case <-f.stop:
			// A last flush, and a few more while counts are left behind it.
			for range 3 {
				f.flush()
				if f.lastErr != nil || (f.pending == nil && f.requests.Load() == 0 && f.probeOK.Load() == 0 && f.probeBad.Load() == 0) {
					break
				}
			}
			return
		}
		f.flush()
	}
}

// flush sends the batch of counts and takes the fleet's state. A batch
// is sent again until the store acknowledges it (the store applies a batch
// once); the counts of the calls meanwhile wait for the next one. A batch
// older than the window is dropped: its counts are outside it.
func (f *fleet) flush() {
	if f.pending != nil && time.Since(f.formed) > f.policy.Window {
		f.pending = nil
	}
	if f.pending == nil {
		f.pending = &Sync{Requests: f.requests.Swap(0), Failures: f.failures.Swap(0),
			ProbeSuccesses: f.probeOK.Swap(0), ProbeFailures: f.probeBad.Swap(0), Generation: f.gen.Load()}
		if *f.pending != (Sync{Generation: f.pending.Generation}) { // something to apply once
			f.seq++
			f.pending.Batch = f.id + "-" + strconv.FormatUint(f.seq, 10)
		}
		f.formed = time.Now()
	}
	s := *f.pending
	s.State = resilience.State(f.state.Load())
	s.WantProbe = s.State == resilience.StateHalfOpen && f.permits.Load() <= 0 && f.demand.Load()
	s.ProbeRunning = f.running.Load() > 0
	s.Policy = f.policy
	ctx, cancel := context.WithTimeout(context.Background(), f.every)
	got, err := f.store.Sync(ctx, f.b.Name(), s)
	cancel()
	f.lastErr = err
	if err != nil {
		if !f.down.Swap(true) {
			f.b.emit(resilience.Event{Kind: resilience.EventSharedStateUnavailable, Name: f.b.Name(), Err: err})
		}
		return
	}
	f.pending = nil
	if f.down.Swap(false) {
		f.b.emit(resilience.Event{Kind: resilience.EventSharedStateRestored, Name: f.b.Name()})
	}
	if old := f.gen.Swap(got.Generation); old != got.Generation {
		// Grants and probe outcomes of another generation are void.
		f.permits.Store(0)
		f.probeOK.Store(0)
		f.probeBad.Store(0)
	}
	if got.ProbeGranted {
		f.demand.Store(false)
		f.permits.Add(1)
	}
	if from := resilience.State(f.state.Swap(uint32(got.State))); from != got.State {
		f.b.fleetChanged(from, got.State)
	}
}

// admit decides a call by the fleet's state: nil to go on (probe: it is a
// fleet probe, for generation gen), or the rejection. A replica whose own
// breaker is not closed does not probe for the fleet: it cannot tell the
// fleet's dependency is back.
func (f *fleet) admit() (probe bool, gen uint64, err error) {
	switch resilience.State(f.state.Load()) {
	case resilience.StateOpen:
		return false, 0, f.b.reject(f.b.errOpen)
	case resilience.StateHalfOpen:
		gen = f.gen.Load()
		if resilience.State(f.b.state.Load()) != resilience.StateClosed || f.permits.Add(-1) < 0 {
			if resilience.State(f.b.state.Load()) == resilience.StateClosed {
				f.permits.Add(1)
				f.demand.Store(true)
				f.flushNow() // ask for a grant now
			}
			return false, 0, f.b.reject(f.b.errBusy)
		}
		f.running.Add(1)
		return true, gen, nil
	}
	return false, 0, nil
}

// record counts a call's outcome for the fleet; a probe's counts for the
// generation it was granted in, or not at all.
func (f *fleet) record(probe bool, gen uint64, outcome error) {
	if probe {
		f.running.Add(-1)
	}
	current := gen == f.gen.Load()
	switch outcome {
	case errIgnored:
		if probe && current {
			f.permits.Add(1) // not a verdict: let another call probe
		}
		return
	case errFailure:
		f.failures.Add(1)
	}
	f.requests.Add(1)
	if probe && current {
		if outcome == errFailure {
			f.probeBad.Add(1)
		} else {
			f.probeOK.Add(1)
		}
		f.flushNow() // report the probe now, not at the next tick
	}
}

// executeShared is Execute for a shared breaker: the fleet's gate, then
// this replica's breaker.
func (b *Breaker) executeShared(ctx context.Context, op func(ctx context.Context) error) error {
	f := b.fleet
	probe, gen, err := f.admit()
	if err != nil {
		return err
	}
	outcome := errFailure // a panic or runtime.Goexit unless op returns
	ran := false
	defer func() {
		switch {
		case ran:
			f.record(probe, gen, outcome)
		case probe:
			f.running.Add(-1)
			if gen == f.gen.Load() {
				f.permits.Add(1) // this replica's breaker rejected it
			}
		}
	}()
	return b.executeOn(b.cb, ctx, func(ctx context.Context) error {
		ran = true
		opErr := op(ctx)
		outcome = b.outcome(ctx, opErr)
		return opErr
	})
}
