package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

var errR26Blip = errors.New("review26: store blip")

// r26Store is a MemoryStore whose Begins can land and still fail (the
// answer lost after the store timeout), and whose Releases can fail.
type r26Store struct {
	*idempotency.MemoryStore
	landButFail  atomic.Bool
	failReleases atomic.Int32 // how many Releases fail next
	releases     atomic.Int32
}

func (s *r26Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	found, err := s.MemoryStore.Begin(context.Background(), key, claim, lease)
	if s.landButFail.Load() && err == nil && found == nil {
		return nil, context.DeadlineExceeded // the claim landed; its answer did not
	}
	return found, err
}

func (s *r26Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.releases.Add(1)
	if s.failReleases.Add(-1) >= 0 {
		return errR26Blip
	}
	return s.MemoryStore.Release(ctx, key, claim)
}

// Guard.reap: "Those it cannot free (the store still fails) are left to
// g's next Begin of their keys, which frees them, or to their leases";
// claim: "A claim that an earlier Begin of this guard's may have left ...
// is freed when it is found, rather than hold its key for a lease". A
// Begin that finds its orphan takes it out of the guard's list before it
// releases it; if that one release meets a blip, the orphan is gone from
// the list: the reaper's later rounds (the store is fine again) no longer
// free it, and the key is held for the whole lease.
func TestReview26_OrphanDroppedWhenBeginsReleaseBlips(t *testing.T) {
	const st = 50 * time.Millisecond
	const lease = 3 * time.Second
	s := &r26Store{MemoryStore: idempotency.NewMemoryStore(0)}
	g := idempotency.NewGuard(s, idempotency.StoreTimeout(st), idempotency.Lease(lease))
	ctx := context.Background()

	s.landButFail.Store(true)
	_, _, err := g.Begin(ctx, "sc", "k", "fp")
	require.Error(t, err) // the claim landed: an orphan
	s.landButFail.Store(false)

	s.failReleases.Store(1) // one blip: the Begin's release of the orphan
	_, _, err = g.Begin(ctx, "sc", "k", "fp")
	require.ErrorIs(t, err, idempotency.ErrInProgress)

	// The store answers again; the reaper's rounds run a store timeout apart.
	deadline := time.Now().Add(lease / 2)
	var claim *idempotency.Claim
	for time.Now().Before(deadline) {
		time.Sleep(st)
		claim, _, err = g.Begin(ctx, "sc", "k", "fp")
		if err == nil {
			break
		}
	}
	t.Logf("releases sent: %d, last err %v", s.releases.Load(), err)
	require.NotNil(t, claim, "the orphan of a Begin that gave up held the key past %v of a %v lease, with the store healthy: the client's retries got %v", lease/2, lease, err)
	require.NoError(t, claim.Release(ctx))
}

// orphans: "at most maxOrphans, the oldest forgotten"; reap: rounds "a
// store timeout apart". With many keys orphaned during an outage, one
// round frees them one by one, each bounded by the store timeout: against
// a store still frozen, a round lasts orphans x StoreTimeout, and a
// client's retry of a key on another replica waits for its lease.
// Checked: the orphans of 1100 keys, the store back, are all freed within
// a few store timeouts (1024 of them), and freeing never takes a live
// claim.
func TestReview26_ManyOrphansFreedNoLiveClaimTaken(t *testing.T) {
	const st = 40 * time.Millisecond
	const lease = 10 * time.Second
	s := &r26Store{MemoryStore: idempotency.NewMemoryStore(0)}
	g := idempotency.NewGuard(s, idempotency.StoreTimeout(st), idempotency.Lease(lease))
	other := idempotency.NewGuard(s, idempotency.StoreTimeout(st), idempotency.Lease(lease)) // another replica
	ctx := context.Background()
	const n = 1100
	s.landButFail.Store(true)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := g.Begin(ctx, "sc", fmt.Sprint(i), "fp")
			assert.Error(t, err)
		}()
	}
	wg.Wait()
	s.landButFail.Store(false)
	// meanwhile live claims on other keys through g, which the reaper must not touch
	var live []*idempotency.Claim
	for i := range 50 {
		c, _, err := g.Begin(ctx, "sc", fmt.Sprint("live", i), "fp")
		require.NoError(t, err)
		live = append(live, c)
	}
	time.Sleep(6 * st)
	freed := 0
	for i := range n {
		c, _, err := other.Begin(ctx, "sc", fmt.Sprint(i), "fp")
		if err == nil {
			freed++
			require.NoError(t, c.Release(ctx))
		}
	}
	t.Logf("freed %d of %d orphaned keys (bound 1024)", freed, n)
	assert.GreaterOrEqual(t, freed, 1024)
	for i, c := range live {
		_, _, err := other.Begin(ctx, "sc", fmt.Sprint("live", i), "fp")
		require.ErrorIs(t, err, idempotency.ErrInProgress, "a live claim was freed")
		require.NoError(t, c.Context().Err())
		require.NoError(t, c.Release(ctx))
	}
}

// r26HangStore hangs every call (until its ctx ends) before until.
type r26HangStore struct {
	*r26Store
	until atomic.Int64
}

func (s *r26HangStore) hang(ctx context.Context) error {
	if d := time.Until(time.Unix(0, s.until.Load())); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *r26HangStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if err := s.hang(ctx); err != nil {
		return err
	}
	return s.r26Store.Release(ctx, key, claim)
}

// reap: "frees the claims that Begins of g gave up on, in reapRounds
// rounds a store timeout apart". The rounds release one orphan after the
// other, each bounded by the store timeout: after an outage that left 300
// orphans, a store that stays frozen for one more store timeout (3 rounds
// would span 3 store timeouts) makes round 1 last 300 store timeouts, and
// the keys stay held that long after the store answers again.
func TestReview26_ReapRoundsSerialUnderFrozenStore(t *testing.T) {
	const st = 40 * time.Millisecond
	const lease = 30 * time.Second
	base := &r26Store{MemoryStore: idempotency.NewMemoryStore(0)}
	s := &r26HangStore{r26Store: base}
	g := idempotency.NewGuard(s, idempotency.StoreTimeout(st), idempotency.Lease(lease))
	other := idempotency.NewGuard(base, idempotency.StoreTimeout(st), idempotency.Lease(lease))
	ctx := context.Background()
	const n = 300
	base.landButFail.Store(true)
	s.until.Store(time.Now().Add(time.Hour).UnixNano())
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = g.Begin(ctx, "sc", fmt.Sprint(i), "fp")
		}()
	}
	wg.Wait()
	base.landButFail.Store(false)
	time.Sleep(2 * st)                           // round 1 has started, against the frozen store
	s.until.Store(time.Now().Add(st).UnixNano()) // the store answers again one store timeout later
	recovered := time.Now().Add(st)
	time.Sleep(st + reapSlack)
	held := 0
	for i := range n {
		c, _, err := other.Begin(ctx, "sc", fmt.Sprint(i), "fp")
		if err == nil {
			require.NoError(t, c.Release(ctx))
		} else {
			held++
		}
	}
	t.Logf("%v after the store answered again, %d of %d orphaned keys still held (lease %v)", time.Since(recovered).Round(time.Millisecond), held, n, lease)
	assert.Zero(t, held, "orphans not freed within 3 store timeouts + slack of the store's recovery")
}

const reapSlack = 4 * 40 * time.Millisecond

// r26LateStore: a Begin in slow mode hangs until its store timeout and
// fails, and its claim lands land later (a SET that was in flight).
type r26LateStore struct {
	*idempotency.MemoryStore
	slow atomic.Bool
	land time.Duration
}

func (s *r26LateStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if !s.slow.Load() {
		return s.MemoryStore.Begin(ctx, key, claim, lease)
	}
	<-ctx.Done()
	go func() {
		time.Sleep(s.land)
		_, _ = s.MemoryStore.Begin(context.Background(), key, claim, lease)
	}()
	return nil, ctx.Err()
}

// reap: "frees the claims that Begins of g gave up on, in reapRounds
// rounds a store timeout apart". The rounds are counted from the first
// orphan of a batch: an orphan noted later, just before the last round,
// gets one try (before its claim lands) and none after, and then holds
// its key for the whole lease; alone, the same orphan is freed by the
// second round.
func TestReview26_LateOrphanGetsOneRound(t *testing.T) {
	for _, alone := range []bool{true, false} {
		t.Run(fmt.Sprint("alone=", alone), func(t *testing.T) {
			const st = 100 * time.Millisecond
			const lease = 30 * time.Second
			s := &r26LateStore{MemoryStore: idempotency.NewMemoryStore(0), land: 2 * st}
			g := idempotency.NewGuard(s, idempotency.StoreTimeout(st), idempotency.Lease(lease))
			other := idempotency.NewGuard(s.MemoryStore, idempotency.StoreTimeout(st), idempotency.Lease(lease))
			ctx := context.Background()
			s.slow.Store(true)
			t0 := time.Now()
			if !alone {
				go func() { _, _, _ = g.Begin(ctx, "sc", "first", "fp") }() // noted at st: rounds at 2, 3, 4 st
				time.Sleep(st * 5 / 2)
			}
			_, _, err := g.Begin(ctx, "sc", "late", "fp") // noted at 3.5 st, its claim lands at 5.5 st
			require.Error(t, err)
			s.slow.Store(false)
			time.Sleep(time.Until(t0.Add(10 * st)))
			c, _, err := other.Begin(ctx, "sc", "late", "fp")
			t.Logf("another replica's Begin of the late orphan's key, %v after: %v", time.Since(t0).Round(time.Millisecond), err)
			require.NoError(t, err, "the orphan holds its key for the lease (%v)", lease)
			require.NoError(t, c.Release(ctx))
		})
	}
}
