package idempotency_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// callClock is a store that notes when each of its calls was made, from
// its start, on the bubble's clock, and fails those its switches say:
// renewals and saves while down, and the next few saves and releases.
type callClock struct {
	idempotency.Store
	start                       time.Time
	downRenew, downComplete     atomic.Bool
	failCompletes, failReleases atomic.Int64 // the next n fail
	mu                          sync.Mutex
	renews, completes, releases []time.Duration
}

func newCallClock() *callClock {
	return &callClock{Store: idempotency.NewMemoryStore(0), start: time.Now()}
}

func (s *callClock) note(calls *[]time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*calls = append(*calls, time.Since(s.start))
}

// times returns a copy of calls.
func (s *callClock) times(calls *[]time.Duration) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), *calls...)
}

func (s *callClock) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	s.note(&s.renews)
	if s.downRenew.Load() {
		return errStoreDown
	}
	return s.Store.Renew(ctx, key, claim, lease)
}

func (s *callClock) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	s.note(&s.completes)
	if s.downComplete.Load() || s.failCompletes.Add(-1) >= 0 {
		return errStoreDown
	}
	return s.Store.Complete(ctx, key, claim, rec, ttl)
}

func (s *callClock) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.note(&s.releases)
	if s.failReleases.Add(-1) >= 0 {
		return errStoreDown
	}
	return s.Store.Release(ctx, key, claim)
}

// storedUnder returns the result stored under key, which g replays.
func storedUnder(t *testing.T, g *idempotency.Guard, key string) *idempotency.Record {
	t.Helper()
	claim, stored, err := g.Begin(t.Context(), "", key, "fp")
	require.NoError(t, err)
	require.Nil(t, claim, "not run again")
	require.NotNil(t, stored, "stored")
	return stored
}

// every returns the times from first to last, step apart.
func every(first, last, step time.Duration) []time.Duration {
	var ts []time.Duration
	for d := first; d <= last; d += step {
		ts = append(ts, d)
	}
	return ts
}

// ms is a number of milliseconds, fractions included.
func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// TestFailedRenewalsAreRetriedSoonerAsTheLeaseRunsOut: a renewal that
// fails is tried again every min(Lease/12, StoreTimeout/2) and, nearer the
// lease's end than twice that, at halving intervals of what is left down
// to 1 ms, so that one gets through if the store comes back at all before
// the lease runs out; the lease is lost by the first try after its end.
func TestFailedRenewalsAreRetriedSoonerAsTheLeaseRunsOut(t *testing.T) {
	for _, tc := range []struct {
		name                string
		lease, storeTimeout time.Duration
		want                []time.Duration // when the renewals are tried, from Begin
	}{
		{
			name: "every Lease/12", lease: 1200 * time.Millisecond, storeTimeout: 400 * time.Millisecond,
			want: append(every(ms(400), ms(1100), ms(100)), // from the first renewal, at a third of the lease
				ms(1150), ms(1175), ms(1187.5), ms(1193.75), ms(1196.875), ms(1198.4375), // half of what is left
				ms(1199.4375), ms(1200.4375)), // 1 ms at least, past the end
		},
		{
			name: "every StoreTimeout/2", lease: 3 * time.Second, storeTimeout: 200 * time.Millisecond,
			want: append(every(ms(1000), ms(2900), ms(100)),
				ms(2950), ms(2975), ms(2987.5), ms(2993.75), ms(2996.875), ms(2998.4375),
				ms(2999.4375), ms(3000.4375)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newCallClock()
				store.downRenew.Store(true)
				ev := &events{}
				g := idempotency.NewGuard(store, quiet(ev, idempotency.Lease(tc.lease), idempotency.StoreTimeout(tc.storeTimeout))...)
				claim, _, err := g.Begin(t.Context(), "", "k", "fp")
				require.NoError(t, err)
				<-claim.Context().Done()
				assert.Equal(t, tc.lease+ms(0.4375), time.Since(store.start), "lost at the first try after the lease's end")
				assert.ErrorIs(t, context.Cause(claim.Context()), idempotency.ErrLeaseLost)
				assert.Equal(t, tc.want, store.times(&store.renews))
				want := make([]string, len(tc.want)-1)
				for i := range want {
					want[i] = "store_failed"
				}
				assert.Equal(t, append(want, "lease_lost"), ev.list(), "each failure reported, then the loss")
				assert.ErrorIs(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}), idempotency.ErrLeaseLost)
			})
		})
	}
}

// pausedRenewal is a store whose first renewal gets through and whose
// answer then comes pause later, whatever its context: the process was
// paused (a long GC pause, a stopped VM) as its renewal returned.
type pausedRenewal struct {
	idempotency.Store
	pause  time.Duration
	paused atomic.Bool
}

func (s *pausedRenewal) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	err := s.Store.Renew(ctx, key, claim, lease)
	if s.paused.CompareAndSwap(false, true) {
		time.Sleep(s.pause)
	}
	return err
}

// TestARenewalAtOrPastTheLeasesEndTakesTheKeyAgain: a process paused so
// long that its next renewal comes when the lease as last renewed ends, or
// after, still gets a whole store timeout for it, and takes the key again
// (no one else took it): the request keeps its key and its result is
// stored.
func TestARenewalAtOrPastTheLeasesEndTakesTheKeyAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration
	}{
		{"at the lease's end", 2 * time.Second}, // renewed at 1 s, to 4 s; answered at 3 s; the next renewal at 4 s
		{"a second past it", 3 * time.Second},   // answered at 4 s; the next renewal at 5 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &pausedRenewal{Store: idempotency.NewMemoryStore(0), pause: tc.pause}
				ev := &events{}
				opts := quiet(ev, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(time.Second))
				g := idempotency.NewGuard(store, opts...)
				claim, _, err := g.Begin(t.Context(), "", "k", "fp")
				require.NoError(t, err)
				time.Sleep(5500 * time.Millisecond)
				assert.NoError(t, claim.Context().Err(), "the key is held still")
				assert.Empty(t, ev.list())
				other := idempotency.NewGuard(store, opts...)
				_, _, err = other.Begin(t.Context(), "", "k", "fp")
				assert.ErrorIs(t, err, idempotency.ErrInProgress, "taken again by its holder")
				require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}))
				assert.Equal(t, 201, storedUnder(t, other, "k").Status)
			})
		})
	}
}

// TestAFailedSaveIsRetriedWithGrowingDelays: a save that fails is tried
// again after StoreTimeout/5, then after twice the delay before, up to
// Lease/12 (here 80 ms, then 100 ms: the lease is 1.2 s, the store timeout
// 400 ms), and the result is stored once a try gets through, with nothing
// reported.
func TestAFailedSaveIsRetriedWithGrowingDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCallClock()
		store.failCompletes.Store(3)
		ev := &events{}
		g := idempotency.NewGuard(store, quiet(ev, idempotency.Lease(1200*time.Millisecond), idempotency.StoreTimeout(400*time.Millisecond))...)
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		require.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}))
		assert.Equal(t, []time.Duration{0, ms(80), ms(180), ms(280)}, store.times(&store.completes))
		assert.Empty(t, ev.list())
		assert.Equal(t, 201, storedUnder(t, g, "k").Status, "stored by the fourth try")
	})
}

// TestASaveGivesUpWhenTheLeaseRunsOut: with the store down, renewals and
// saves alike, the last save is tried when the lease left covers just one
// store timeout (so that it can end in time), none after it; Complete
// returns the store's error when the lease runs out, not before, and
// reports the result not stored.
func TestASaveGivesUpWhenTheLeaseRunsOut(t *testing.T) {
	for _, tc := range []struct {
		name                string
		lease, storeTimeout time.Duration
		want                []time.Duration // when the saves are tried
	}{
		{
			name: "the default store timeout", lease: 30 * time.Second, storeTimeout: 500 * time.Millisecond,
			// After 100, 200, 400 and 800 ms, then every second (2 store
			// timeouts), to 29.5 s: 30 s less a store timeout.
			want: append([]time.Duration{0, ms(100), ms(300), ms(700)}, every(ms(1500), ms(29500), time.Second)...),
		},
		{
			name: "a lease of 3 store timeouts", lease: 3 * time.Second, storeTimeout: time.Second,
			// After 200 ms, then every 250 ms (Lease/12), to 1.95 s;
			// then at 2 s, the last moment with a store timeout left.
			want: append(append([]time.Duration{0}, every(ms(200), ms(1950), ms(250))...), ms(2000)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newCallClock()
				ev := &events{}
				g := idempotency.NewGuard(store, quiet(ev, idempotency.Lease(tc.lease), idempotency.StoreTimeout(tc.storeTimeout),
					idempotency.FailOpenAfter(-1))...) // else, renewals failing for 10 s, the claim goes on on the local records
				claim, _, err := g.Begin(t.Context(), "", "k", "fp")
				require.NoError(t, err)
				store.downRenew.Store(true)
				store.downComplete.Store(true)
				err = claim.Complete(t.Context(), idempotency.Record{Status: 201})
				assert.ErrorIs(t, err, errStoreDown)
				assert.Equal(t, tc.lease, time.Since(store.start), "given up as the lease ran out")
				assert.Equal(t, tc.want, store.times(&store.completes))
				assert.Contains(t, ev.list(), "not_stored")
			})
		})
	}
}

// TestAFailedReleaseIsRetriedPromptly: a release that fails is tried again
// twice, after a delay drawn up to StoreTimeout/5 and then up to twice
// that (100 and 200 ms by default), and frees the key.
func TestAFailedReleaseIsRetriedPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCallClock()
		g := idempotency.NewGuard(store, quiet(&events{})...)
		for i := range 20 { // the delays are drawn: 20 releases, so that a larger cap shows
			claim, _, err := g.Begin(t.Context(), "", "k", "fp")
			require.NoError(t, err)
			store.failReleases.Store(2)
			from := len(store.times(&store.releases))
			require.NoError(t, claim.Release(t.Context()))
			ts := store.times(&store.releases)[from:]
			require.Len(t, ts, 3, "release %d: two failures, then freed", i)
			assert.LessOrEqual(t, ts[1]-ts[0], 100*time.Millisecond, "release %d: the first delay", i)
			assert.LessOrEqual(t, ts[2]-ts[1], 200*time.Millisecond, "release %d: the second delay", i)
		}
		again, _, err := g.Begin(t.Context(), "", "k", "fp")
		require.NoError(t, err)
		require.NotNil(t, again, "freed")
		require.NoError(t, again.Release(t.Context()))
	})
}
