package breaker

import (
	"context"
	"fmt"
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
	// Requests and Failures count the outcomes since the last Sync: calls
	// that ended, and the failures among them.
	Requests, Failures uint64
	// ProbeSuccesses and ProbeFailures count the outcomes of the probes
	// this replica ran for the fleet's half-open Generation.
	ProbeSuccesses, ProbeFailures uint32
	Generation                    uint64
	// WantProbe asks for a probe, if the fleet is half-open.
	WantProbe bool
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
	// replica may have it: the probe's time budget.
	ProbeTimeout time.Duration
}

// Fleet is the fleet breaker's state as a store returns it.
type Fleet struct {
	State State
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
// call [Breaker.Close] when done with it. It panics without a
// [FailureRate]. Default: not shared. docs/shared-breaker.md tells the
// model.
func Shared(store SharedStore) Option {
	return optionFunc(func(c *config) { c.shared = store })
}

// FlushInterval sets how often a shared breaker sends its counts and
// learns the fleet's state: how stale a replica's view of the fleet may
// be. Each flush is bounded by the interval too. Default 100 ms. It panics
// if d is not positive.
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

	requests, failures atomic.Uint64 // since the last flush
	state              atomic.Uint32 // the fleet's State, as last synced
	gen                atomic.Uint64
	permits            atomic.Int64  // probes granted to this replica, not yet run
	probeOK, probeBad  atomic.Uint32 // outcomes of probes for gen, not yet sent
	down               atomic.Bool

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
			OpenTimeout: c.openTimeout, HalfOpenRequests: c.halfOpenRequests, ProbeTimeout: c.openTimeout,
		},
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
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

// Close stops a shared breaker's flusher after a last flush of its counts,
// and waits for it. It is a no-op for a breaker that is not shared, and
// safe to call more than once.
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
	return nil
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
			f.flush()
			return
		}
		f.flush()
	}
}

// flush sends the counts since the last flush and takes the fleet's state.
// On failure the counts are added back, to go with the next flush.
func (f *fleet) flush() {
	s := Sync{
		Requests:       f.requests.Swap(0),
		Failures:       f.failures.Swap(0),
		ProbeSuccesses: f.probeOK.Swap(0),
		ProbeFailures:  f.probeBad.Swap(0),
		Generation:     f.gen.Load(),
		Policy:         f.policy,
	}
	s.WantProbe = State(f.state.Load()) == HalfOpen && f.permits.Load() <= 0
	ctx, cancel := context.WithTimeout(context.Background(), f.every)
	got, err := f.store.Sync(ctx, f.b.Name(), s)
	cancel()
	if err != nil {
		f.requests.Add(s.Requests)
		f.failures.Add(s.Failures)
		f.probeOK.Add(s.ProbeSuccesses)
		f.probeBad.Add(s.ProbeFailures)
		if !f.down.Swap(true) {
			f.b.emit(resilience.Event{Kind: resilience.EventSharedStateUnavailable, Name: f.b.Name(), Err: err})
		}
		return
	}
	if f.down.Swap(false) {
		f.b.emit(resilience.Event{Kind: resilience.EventSharedStateRestored, Name: f.b.Name()})
	}
	if old := f.gen.Swap(got.Generation); old != got.Generation {
		f.permits.Store(0) // grants of another generation are void
	}
	if got.ProbeGranted {
		f.permits.Add(1)
	}
	if from := State(f.state.Swap(uint32(got.State))); from != got.State {
		f.b.emit(resilience.Event{Kind: resilience.EventStateChange, Name: f.b.Name() + " (fleet)", From: from, To: got.State})
	}
}

// admit decides a call by the fleet's state: nil to go on (probe: it is a
// fleet probe), or the rejection.
func (f *fleet) admit() (probe bool, err error) {
	switch State(f.state.Load()) {
	case Open:
		return false, f.b.reject(f.b.errOpen)
	case HalfOpen:
		if f.permits.Add(-1) < 0 {
			f.permits.Add(1)
			return false, f.b.reject(f.b.errBusy)
		}
		return true, nil
	}
	return false, nil
}

// record counts a call's outcome for the fleet.
func (f *fleet) record(probe bool, outcome error) {
	switch outcome {
	case errIgnored:
		if probe {
			f.permits.Add(1) // not a verdict: let another call probe
		}
		return
	case errFailure:
		f.failures.Add(1)
	}
	f.requests.Add(1)
	if probe {
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
	probe, err := f.admit()
	if err != nil {
		return err
	}
	outcome := errFailure // a panic or runtime.Goexit unless op returns
	ran := false
	defer func() {
		if ran {
			f.record(probe, outcome)
		} else if probe {
			f.permits.Add(1) // this replica's breaker rejected it
		}
	}()
	return b.executeOn(b.cb, ctx, func(ctx context.Context) error {
		ran = true
		opErr := op(ctx)
		outcome = b.outcome(ctx, opErr)
		return opErr
	})
}
