package breaker_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// panicView is a forceView whose methods named in panics panic, and that
// is a watcher and a reader too.
type panicView struct {
	*forceView
	mu     sync.Mutex
	panics map[string]bool
}

func (p *panicView) maybe(method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.panics[method] {
		panic(method + " bug")
	}
}

func (p *panicView) set(methods ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.panics = map[string]bool{}
	for _, m := range methods {
		p.panics[m] = true
	}
}

func (p *panicView) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	p.maybe("Force")
	return p.forceView.Force(ctx, name, f, after)
}

func (p *panicView) Restore(ctx context.Context, name string, f breaker.Forcing, version uint64) error {
	p.maybe("Restore")
	return p.forceView.Restore(ctx, name, f, version)
}

func (p *panicView) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	p.maybe("Forced")
	return p.forceView.Forced(ctx, name)
}

func (p *panicView) Watch(ctx context.Context, _ string, _ func(breaker.Fleet)) error {
	p.maybe("Watch")
	<-ctx.Done()
	return ctx.Err()
}

func (p *panicView) Read(context.Context, string, breaker.FleetPolicy) (breaker.FleetStatus, error) {
	p.maybe("Read")
	return breaker.FleetStatus{}, nil
}

// Whichever of the shared store's methods panics, the panic is that
// method's error: the process goes on (the flusher's and the watcher's
// goroutines would have ended it), the replica's calls go on, SetMode
// and Fleet return it as an error, and a mode the store could not take
// is written once the store works again.
func TestAStoreMethodThatPanicsIsAMethodThatFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		pv := &panicView{forceView: &forceView{m: m}}
		pv.set("Watch", "Read", "Force", "Forced")
		a := breaker.New("payments", breaker.Shared(pv), breaker.FailureRate(0.5, 10), breaker.FlushInterval(forceFlush))
		defer a.Close()
		b, bv := forceReplica(t, m)

		require.ErrorContains(t, a.SetMode(t.Context(), breaker.ForcedClosed, "alice"), "Force panicked: Force bug")
		_, err := a.Fleet(t.Context())
		require.ErrorContains(t, err, "Read panicked: Read bug")
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedOpen, "bob"), "a newer version: A asks the store for it")
		time.Sleep(5 * forceFlush)
		assert.Equal(t, breaker.ForcedClosed, a.Mode().Mode, "A could read nothing: it keeps its own")
		require.NoError(t, a.Execute(t.Context(), func(context.Context) error { return nil }))

		pv.set("Watch", "Restore")
		time.Sleep(3 * forceFlush)
		assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode, "bob's came after alice's: A takes it, and does not write its own")
		assert.Equal(t, breaker.ForcedOpen, a.Mode().Mode)

		bv.down.Store(true) // B writes nothing back
		m.mu.Lock()
		m.mode, m.version = breaker.Forcing{}, 0 // the store went back in time
		m.mu.Unlock()
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		assert.Zero(t, m.version, "Restore panics: nothing written back")
		m.mu.Unlock()

		pv.set()
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Equal(t, breaker.ForcedOpen, m.mode.Mode, "written back once Restore works")
	})
}
