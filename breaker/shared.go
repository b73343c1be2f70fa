package breaker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// SharedStore keeps a breaker's state where the replicas of a service can
// share it, so that failures seen by one open the breaker for all. Lock and
// Unlock guard a read-modify-write of the data under a name. The
// breakerstore package of the nested module
// github.com/resiliencekit/resiliencekit/redis has one on Redis. Implementations are safe for
// concurrent use.
type SharedStore interface {
	Lock(name string) error
	Unlock(name string) error
	GetData(name string) ([]byte, error)
	SetData(name string, data []byte) error
}

// Shared makes the breaker keep its state in store, shared with every
// breaker of the same name on the same store, through gobreaker's
// DistributedCircuitBreaker. A call syncs the state before it runs, and
// records its outcome after, each under the store's lock; the call itself
// runs outside the lock, except a half-open probe, which holds it so that
// the replicas probe one at a time. When the store fails, the breaker goes
// on with the state it last saw, reports [resilience.EventSharedStateUnavailable]
// and tries the store again after [SharedRetryInterval]. Default: not
// shared.
func Shared(store SharedStore) Option {
	return optionFunc(func(c *config) { c.shared = store })
}

// SharedRetryInterval sets how long a breaker whose shared store failed
// works locally before it tries the store again. Default 1 s. It panics if
// d is not positive.
func SharedRetryInterval(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("breaker: SharedRetryInterval(%v): d must be more than 0", d))
	}
	return optionFunc(func(c *config) { c.sharedRetry = d })
}

// unstalled wraps a SharedStore so that a failed Lock never stalls a call:
// gobreaker retries a failed Lock for 5 s, so a Lock error is taken as
// "proceed without the lock", and the next store access, failing too if
// the store is down, makes the breaker fall back to local state. A
// per-name mutex keeps one goroutine of this process between Lock and
// Unlock, which makes the held flags safe.
type unstalled struct {
	SharedStore
	mu    sync.Mutex
	names map[string]*heldLock
}

type heldLock struct {
	sync.Mutex
	held bool
}

func (u *unstalled) lock(name string) *heldLock {
	u.mu.Lock()
	defer u.mu.Unlock()
	l, ok := u.names[name]
	if !ok {
		l = new(heldLock)
		u.names[name] = l
	}
	return l
}

func (u *unstalled) Lock(name string) error {
	l := u.lock(name)
	l.Lock()
	l.held = u.SharedStore.Lock(name) == nil
	return nil
}

func (u *unstalled) Unlock(name string) error {
	l := u.lock(name)
	defer l.Unlock()
	if !l.held {
		return nil
	}
	l.held = false
	return u.SharedStore.Unlock(name)
}

// shared is the distributed side of a Breaker.
type shared struct {
	store    SharedStore
	settings gobreaker.Settings
	retry    time.Duration

	mu        sync.Mutex // guards dcb's creation
	dcb       *gobreaker.DistributedCircuitBreaker[struct{}]
	downUntil atomic.Int64 // unix nanos before which the store is not tried
	down      atomic.Bool  // the last store access failed
}

// distributed returns the distributed breaker, creating it if needed, or
// nil while the store is failing.
func (b *Breaker) distributed() *gobreaker.DistributedCircuitBreaker[struct{}] {
	s := b.shared
	if time.Now().UnixNano() < s.downUntil.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dcb == nil {
		dcb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](&unstalled{SharedStore: s.store, names: map[string]*heldLock{}}, s.settings)
		if err != nil {
			b.storeFailed(err)
			return nil
		}
		s.dcb = dcb
	}
	return s.dcb
}

// local returns the breaker that works while the store fails: the
// distributed breaker's own copy of the state, once it has one.
func (b *Breaker) local() *gobreaker.CircuitBreaker[struct{}] {
	if b.shared != nil {
		b.shared.mu.Lock()
		defer b.shared.mu.Unlock()
		if b.shared.dcb != nil {
			return b.shared.dcb.CircuitBreaker
		}
	}
	return b.cb
}

func (b *Breaker) storeFailed(err error) {
	s := b.shared
	s.downUntil.Store(time.Now().Add(s.retry).UnixNano())
	if !s.down.Swap(true) {
		b.emit(resilience.Event{Kind: resilience.EventSharedStateUnavailable, Name: b.Name(), Err: err})
	}
}

func (b *Breaker) storeWorked() {
	if b.shared.down.Swap(false) {
		b.emit(resilience.Event{Kind: resilience.EventSharedStateRestored, Name: b.Name()})
	}
}

// sharedState syncs with the store and returns the distributed breaker
// and the state, or a nil breaker if the store failed.
func (b *Breaker) sharedState() (*gobreaker.DistributedCircuitBreaker[struct{}], State) {
	dcb := b.distributed()
	if dcb == nil {
		return nil, 0
	}
	st, err := dcb.State()
	if err != nil {
		b.storeFailed(err)
		return nil, 0
	}
	b.storeWorked()
	s := fromGobreaker(st)
	b.state.Store(uint32(s))
	return dcb, s
}

// executeShared is Execute for a breaker with a shared store.
func (b *Breaker) executeShared(ctx context.Context, op func(ctx context.Context) error) error {
	dcb, st := b.sharedState()
	if dcb == nil {
		return b.executeOn(b.local(), ctx, op)
	}
	switch st {
	case Open:
		return b.reject(b.errOpen)
	case HalfOpen:
		// The probe runs under the store's lock.
		var ran bool
		var opErr error
		_, err := dcb.Execute(func() (struct{}, error) {
			ran = true
			opErr = op(ctx)
			return struct{}{}, b.outcome(ctx, opErr)
		})
		return b.sharedResult(ran, opErr, err, ctx, op)
	}
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit: a failure, as for a local breaker
			b.recordShared(dcb, errFailure)
		}
	}()
	opErr := op(ctx)
	returned = true
	b.recordShared(dcb, b.outcome(ctx, opErr))
	return opErr
}

// recordShared records a call's outcome in the shared state, or locally if
// the store fails.
func (b *Breaker) recordShared(dcb *gobreaker.DistributedCircuitBreaker[struct{}], outcome error) {
	_, err := dcb.Execute(func() (struct{}, error) { return struct{}{}, outcome })
	if isStoreError(err) {
		b.storeFailed(err)
		_, _ = b.local().Execute(func() (struct{}, error) { return struct{}{}, outcome })
	}
}

// sharedResult maps the result of a probe run through the distributed
// breaker.
func (b *Breaker) sharedResult(ran bool, opErr, err error, ctx context.Context, op func(context.Context) error) error {
	if res, ok := b.result(err, opErr); ok {
		return res
	}
	b.storeFailed(err)
	if ran {
		return opErr
	}
	return b.executeOn(b.local(), ctx, op)
}

// isStoreError reports whether err, returned by the distributed breaker,
// is the shared store's failure rather than an outcome or a rejection.
func isStoreError(err error) bool {
	switch err {
	case nil, errFailure, errIgnored, gobreaker.ErrOpenState, gobreaker.ErrTooManyRequests:
		return false
	}
	return true
}
