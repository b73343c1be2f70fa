package breaker

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// audience holds the listeners of a breaker's own events (its state
// changes and those of its shared state) that [Breaker.Listen] added. It
// is read without a lock on every event and copied on every change.
type audience struct {
	mu   sync.Mutex
	subs atomic.Pointer[[]*subscription] // replaced, never changed
}

// subscription is one Listen: its own pointer, so that stopping it removes
// it and no other, whatever its listener is.
type subscription struct{ l resilience.Listener }

func (a *audience) add(s *subscription) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next []*subscription
	if old := a.subs.Load(); old != nil {
		next = slices.Clone(*old)
	}
	next = append(next, s)
	a.subs.Store(&next)
}

func (a *audience) remove(s *subscription) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.subs.Load()
	if old == nil {
		return
	}
	next := slices.DeleteFunc(slices.Clone(*old), func(x *subscription) bool { return x == s })
	a.subs.Store(&next)
}

// Listen adds l to the listeners of b's state changes, the fleet's
// included, and of the events of its shared state store, until stop is
// called; stop may be called more than once. A listener that hears b
// several times over (given to [WithListener] too, or to several
// pipelines built on b) hears each event once. Rejections are not among
// these events: they go to b's own listener and to the listener of the
// call that was rejected (see [Breaker.Unheard]). pipeline.New calls
// Listen for the pipeline's listener, so that every pipeline built on b
// hears its state changes, whatever the order they were built in; a
// pipeline no longer used stops listening when it is garbage collected.
// State changes are reported under b's lock: l must not call b, and every
// call through b waits while l runs. Listen is safe for concurrent use; a
// nil l adds nothing.
func (b *Breaker) Listen(l resilience.Listener) (stop func()) {
	if b == nil || b.cb == nil || l == nil {
		return func() {}
	}
	s := &subscription{l: l}
	b.audience.add(s)
	var once sync.Once
	return func() { once.Do(func() { b.audience.remove(s) }) }
}

// Unheard returns l less the listeners that b reports its events to
// already ([WithListener]), or nil if none is left. A pipeline reports the
// rejections of its calls by b to Unheard(its listener), so that a
// listener given to both hears each rejection once. It is safe for
// concurrent use.
func (b *Breaker) Unheard(l resilience.Listener) resilience.Listener {
	sl := safe.New("", l)
	if b != nil {
		sl = sl.Without(b.listener)
	}
	if sl == nil {
		return nil
	}
	return sl
}

// emit passes one of b's own events, once, to each listener of b's own
// and of those that Listen added.
func (b *Breaker) emit(e resilience.Event) {
	subs := b.audience.subs.Load()
	if subs == nil || len(*subs) == 0 {
		b.listener.Emit(e)
		return
	}
	ls := make([]resilience.Listener, 0, len(*subs)+1)
	ls = append(ls, b.listener)
	for _, s := range *subs {
		ls = append(ls, s.l)
	}
	safe.Fan(e, ls...)
}
