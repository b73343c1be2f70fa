package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r29Store is a MemoryStore behind a switch: while down, every call fails
// (refuses at once); flap, if set, decides per Begin whether it fails.
type r29Store struct {
	mem    *idempotency.MemoryStore
	down   atomic.Bool
	begins atomic.Int64
	flap   func(n int64) bool // true: this Begin fails
}

var errR29Down = errors.New("r29: store down")

func newR29Store() *r29Store { return &r29Store{mem: idempotency.NewMemoryStore(0)} }

func (s *r29Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	n := s.begins.Add(1)
	if s.down.Load() || (s.flap != nil && s.flap(n)) {
		return nil, errR29Down
	}
	return s.mem.Begin(ctx, key, claim, lease)
}
func (s *r29Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.down.Load() {
		return errR29Down
	}
	return s.mem.Renew(ctx, key, claim, lease)
}
func (s *r29Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		return errR29Down
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}
func (s *r29Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.down.Load() {
		return errR29Down
	}
	return s.mem.Release(ctx, key, claim)
}

type r29Events struct {
	mu    sync.Mutex
	kinds map[resilience.EventKind]int
}

func (e *r29Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[resilience.EventKind]int{}
	}
	e.kinds[ev.Kind]++
}
func (e *r29Events) n(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kinds[k]
}

// A store that fails most claims but answers one now and then (a flapping
// link, an overloaded Redis answering some commands within the timeout)
// never lets the guard fail open: every keyed request it fails is refused,
// for as long as it flaps. Do no harm: a plain server would run them all;
// the rule asks for a way out within a bounded time.
func TestReview29FlappingStoreRefusesForever(t *testing.T) {
	s := newR29Store()
	s.flap = func(n int64) bool { return n%4 != 0 } // 3 of 4 claims fail
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(100*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond))
	ctx := context.Background()
	var refused, ran int
	deadline := time.Now().Add(1500 * time.Millisecond) // 15 x FailOpenAfter
	i := 0
	for time.Now().Before(deadline) {
		i++
		c, _, err := g.Begin(ctx, "s", fmt.Sprintf("k%d", i), "fp")
		if err != nil {
			refused++
		} else {
			ran++
			require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// refusals in the last second, well past FailOpenAfter
	late := 0
	for j := 0; j < 100; j++ {
		i++
		c, _, err := g.Begin(ctx, "s", fmt.Sprintf("k%d", i), "fp")
		if err != nil {
			late++
			continue
		}
		require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
	}
	t.Logf("over 1.5 s: %d ran, %d refused; then %d of 100 refused", ran, refused, late)
	assert.Less(t, late, 10, "15 x FailOpenAfter into a store failing 3 claims of 4, keyed requests are still refused")
}

// Once open, the first probe that gets through closes it: with a store that
// answers one claim in a few, the guard flips between refusing for
// FailOpenAfter and running, each flip reported.
func TestReview29FlappingStoreFlipsAndRefusesAgain(t *testing.T) {
	s := newR29Store()
	s.down.Store(true)
	ev := &r29Events{}
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(200*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond), idempotency.WithListener(ev))
	ctx := context.Background()
	i := 0
	begin := func() error {
		i++
		c, _, err := g.Begin(ctx, "s", fmt.Sprintf("k%d", i), "fp")
		if err == nil {
			_ = c.Complete(ctx, idempotency.Record{Status: 201})
		}
		return err
	}
	// fail open
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond {
		_ = begin()
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, begin(), "open by now")
	// the store now answers 1 claim of 3 (still failing most)
	s.flap = func(n int64) bool { return n%3 != 0 }
	s.down.Store(false)
	refused, total := 0, 0
	start = time.Now()
	for time.Since(start) < 2500*time.Millisecond {
		total++
		if begin() != nil {
			refused++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("store failing 2 of 3 claims: %d of %d refused; unavailable %d, restored %d", refused, total,
		ev.n(resilience.EventSharedStateUnavailable), ev.n(resilience.EventSharedStateRestored))
	assert.Less(t, refused, total/10, "a guard that had failed open goes back to refusing most requests at the first probe the store answers")
}

// A request claimed on the store just before it goes down keeps running
// while the guard fails open (new requests run on local records); its
// renewals fail until the lease runs out, and then its context is canceled
// (ErrLeaseLost): the one request that a plain server would also have
// completed is the one the toolkit kills, while it runs everything else
// unprotected.
func TestReview29InFlightRequestKilledWhileGuardIsOpen(t *testing.T) {
	s := newR29Store()
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(50*time.Millisecond),
		idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond))
	ctx := context.Background()
	c, _, err := g.Begin(ctx, "s", "long", "fp")
	require.NoError(t, err)
	s.down.Store(true)
	// the guard fails open: new requests run
	start := time.Now()
	opened := false
	for i := 0; time.Since(start) < time.Second && !opened; i++ {
		c2, _, err := g.Begin(ctx, "s", fmt.Sprintf("n%d", i), "fp")
		if err == nil {
			opened = true
			require.NoError(t, c2.Complete(ctx, idempotency.Record{Status: 201}))
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, opened, "the guard failed open")
	// the long handler works on for 1.5 s (2.5 leases)
	select {
	case <-c.Context().Done():
		t.Errorf("handler canceled after %v while the guard runs new requests unprotected: %v", time.Since(start).Round(time.Millisecond), context.Cause(c.Context()))
	case <-time.After(1500 * time.Millisecond):
	}
	err = c.Complete(ctx, idempotency.Record{Status: 201})
	t.Logf("Complete: %v", err)
}

// Events: one Unavailable and one Restored per transition, with many
// goroutines hammering the guard.
func TestReview29EventsOncePerTransitionConcurrent(t *testing.T) {
	s := newR29Store()
	ev := &r29Events{}
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(100*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond), idempotency.WithListener(ev))
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var n atomic.Int64
	var errs atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := n.Add(1)
				c, rec, err := g.Begin(ctx, "s", fmt.Sprintf("k%d", i), "fp") // new keys: a key run on the local records is answered there
				switch {
				case err != nil:
					errs.Add(1)
				case rec != nil:
				default:
					_ = c.Complete(ctx, idempotency.Record{Status: 201})
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	for cycle := 0; cycle < 2; cycle++ {
		time.Sleep(150 * time.Millisecond)
		s.down.Store(true)
		time.Sleep(600 * time.Millisecond)
		s.down.Store(false)
		time.Sleep(3500 * time.Millisecond) // 3 probes a probeEvery apart
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("requests %d, refused %d; unavailable %d restored %d", n.Load(), errs.Load(),
		ev.n(resilience.EventSharedStateUnavailable), ev.n(resilience.EventSharedStateRestored))
	assert.Equal(t, 2, ev.n(resilience.EventSharedStateUnavailable))
	assert.Equal(t, 2, ev.n(resilience.EventSharedStateRestored))
}

// Extreme Lease: near MaxInt64, inside and outside a synctest bubble.
func TestReview29HugeLeaseDeadline(t *testing.T) {
	check := func(t *testing.T) {
		for _, l := range []time.Duration{math.MaxInt64, math.MaxInt64 / 2, 200 * 365 * 24 * time.Hour} {
			g := idempotency.NewGuard(idempotency.NewMemoryStore(0), idempotency.Lease(l), idempotency.StoreTimeout(time.Millisecond))
			c, _, err := g.Begin(context.Background(), "s", "k", "fp")
			require.NoError(t, err)
			d := c.LeaseDeadline()
			assert.True(t, d.After(time.Now().Add(50*365*24*time.Hour)), "lease %v: deadline %v", l, d)
			ctx, cancel := c.WithLeaseDeadline(context.Background())
			time.Sleep(10 * time.Millisecond)
			assert.NoError(t, ctx.Err(), "lease %v", l)
			if dl, ok := ctx.Deadline(); ok {
				assert.True(t, dl.After(time.Now()), "lease %v: ctx deadline %v in the past", l, dl)
			}
			cancel()
			require.NoError(t, c.Complete(context.Background(), idempotency.Record{Status: 200}))
			_, rec, err := g.Begin(context.Background(), "s", "k", "fp")
			require.NoError(t, err)
			require.NotNil(t, rec)
		}
	}
	t.Run("real", check)
	t.Run("bubble", func(t *testing.T) { synctest.Test(t, check) })
}

// Fail open inside a synctest bubble: monotonic readings there are
// negative (the bubble's clock is 2000-01-01).
func TestReview29FailOpenInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR29Store()
		s.down.Store(true)
		ev := &r29Events{}
		g := idempotency.NewGuard(s, idempotency.FailOpenAfter(2*time.Second), idempotency.StoreTimeout(100*time.Millisecond), idempotency.WithListener(ev))
		ctx := context.Background()
		_, _, err := g.Begin(ctx, "s", "a", "fp")
		require.Error(t, err)
		time.Sleep(1900 * time.Millisecond)
		_, _, err = g.Begin(ctx, "s", "a", "fp")
		require.Error(t, err, "before FailOpenAfter")
		time.Sleep(100 * time.Millisecond)
		c, _, err := g.Begin(ctx, "s", "a", "fp")
		require.NoError(t, err, "at FailOpenAfter")
		dl := c.LeaseDeadline()
		assert.Equal(t, time.Now().Add(30*time.Second), dl)
		_, _, err = g.Begin(ctx, "s", "a", "fp")
		require.ErrorIs(t, err, idempotency.ErrInProgress)
		require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("x")}))
		_, rec, err := g.Begin(ctx, "s", "a", "fp")
		require.NoError(t, err)
		require.NotNil(t, rec)
		// local lease in a bubble: a long handler renews on local records
		c2, _, err := g.Begin(ctx, "s", "b", "fp")
		require.NoError(t, err)
		time.Sleep(95 * time.Second)
		require.NoError(t, c2.Context().Err(), "renewed on local records")
		require.NoError(t, c2.Complete(ctx, idempotency.Record{Status: 201}))
		s.down.Store(false)
		for i := range 4 { // 3 probes a second apart that the store answers end it
			time.Sleep(time.Second)
			c3, _, err := g.Begin(ctx, "s", fmt.Sprint("c", i), "fp")
			require.NoError(t, err)
			require.NoError(t, c3.Complete(ctx, idempotency.Record{Status: 201}))
		}
		assert.Equal(t, 1, ev.n(resilience.EventSharedStateUnavailable))
		assert.Equal(t, 1, ev.n(resilience.EventSharedStateRestored))
	})
}

// A request that ran on this process's local records during the outage,
// repeated to the same process once the store is back, runs again: the
// process holds its record, yet asks only the store. The docs list as the
// cost only a repeat to another replica, or of a request the store held
// before it went down; a repeat to this process is to get "409 and then
// its replay".
func TestReview29RepeatToSameProcessAfterRestoreRunsAgain(t *testing.T) {
	s := newR29Store()
	s.down.Store(true)
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(0), idempotency.StoreTimeout(50*time.Millisecond))
	ctx := context.Background()
	c, rec, err := g.Begin(ctx, "s", "pay-1", "fp")
	require.NoError(t, err, "FailOpenAfter(0): runs locally at once")
	require.Nil(t, rec)
	require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte(`{"charge":1}`)}))
	_, rec, err = g.Begin(ctx, "s", "pay-1", "fp")
	require.NoError(t, err)
	require.NotNil(t, rec, "replayed locally while open")

	s.down.Store(false)
	time.Sleep(1100 * time.Millisecond) // a probe is due
	c2, _, err := g.Begin(ctx, "s", "other", "fp")
	require.NoError(t, err)
	require.NoError(t, c2.Complete(ctx, idempotency.Record{Status: 201}))

	c3, rec, err := g.Begin(ctx, "s", "pay-1", "fp")
	require.NoError(t, err)
	if c3 != nil {
		_ = c3.Release(ctx)
	}
	assert.NotNil(t, rec, "the repeat of pay-1 to the process that ran it and still holds its record runs the handler again")
}
