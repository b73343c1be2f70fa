package idempotency_test

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// gatedBegin is a store whose Begin waits until open is closed, so that
// the Begins of one key that come meanwhile find it being claimed; it
// fails with fail, or panics once if panics is set.
type gatedBegin struct {
	idempotency.Store
	open   chan struct{}
	asked  atomic.Int64
	fail   error
	panics atomic.Bool
}

func (s *gatedBegin) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.asked.Add(1)
	<-s.open
	if s.panics.CompareAndSwap(true, false) {
		panic("store")
	}
	if s.fail != nil {
		return nil, s.fail
	}
	return s.Store.Begin(ctx, key, claim, lease)
}

// TestBeginsOfAKeyBeingClaimedGetItsAnswer: Begins of one key at the same
// moment in one process ask the store once, and each answers from what
// the first found, by its own fingerprint: simultaneous repeats of a
// request that ended are all replayed, not refused as in progress, even
// behind a Begin of another fingerprint; of a free key, one runs and the
// others are in progress (or reuse the key); a store failure is every
// one's, a store's panic too (an error, not a try each in turn); a
// waiter whose context ends stops waiting; and what the first Begin's
// caller does with its record is its own.
func TestBeginsOfAKeyBeingClaimedGetItsAnswer(t *testing.T) {
	boom := errors.New("store down")
	tests := []struct {
		name   string
		ended  bool   // the key's request, of fingerprint "fp", ended before
		first  string // the fingerprint of the Begin that claims, "fp" if ""
		fail   error  // the store's answer to the Begins
		panics bool

		replays, claims, progress, reused, failed int
	}{
		{name: "ended", ended: true, replays: 20},
		{name: "ended, another fingerprint first", ended: true, first: "other", replays: 19, reused: 1},
		{name: "free", claims: 1, progress: 19},
		{name: "free, another fingerprint first", first: "other", claims: 1, reused: 19},
		{name: "store failing", fail: boom, failed: 20},
		{name: "store panicking", panics: true, failed: 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				store := &gatedBegin{Store: idempotency.NewMemoryStore(0), open: make(chan struct{}), fail: tt.fail}
				close(store.open)
				var ev events
				g := idempotency.NewGuard(store, quiet(&ev)...)
				if tt.ended {
					claim, _, err := g.Begin(ctx, "alice", "k", "fp")
					require.NoError(t, err)
					require.NoError(t, claim.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("order 1")}))
				}
				store.open = make(chan struct{})
				store.asked.Store(0)
				store.panics.Store(tt.panics)

				var mu sync.Mutex
				var replays, progress, reused, failed, panicked int
				var claims []*idempotency.Claim
				begin := func(fp string) {
					defer func() {
						if recover() != nil {
							mu.Lock()
							panicked++
							mu.Unlock()
						}
					}()
					claim, stored, err := g.Begin(ctx, "alice", "k", fp)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, idempotency.ErrInProgress):
						progress++
					case errors.Is(err, idempotency.ErrKeyReused):
						reused++
					case err != nil:
						failed++
						if tt.fail != nil {
							assert.ErrorIs(t, err, tt.fail)
						}
					case claim != nil:
						claims = append(claims, claim) // held until all have their answer
					default:
						replays++
						assert.Equal(t, 201, stored.Status)
						assert.Equal(t, "order 1", string(stored.Body))
						stored.Status = 999 // its own
					}
				}
				var wg sync.WaitGroup
				wg.Go(func() { begin(cmp.Or(tt.first, "fp")) })
				synctest.Wait() // the first asks the store
				for range 19 {
					wg.Go(func() { begin("fp") })
				}
				synctest.Wait()
				gone, cancel := context.WithCancel(ctx)
				cancel()
				_, _, err := g.Begin(gone, "alice", "k", "fp")
				assert.ErrorIs(t, err, context.Canceled, "a waiter whose context ended")
				close(store.open)
				wg.Wait()
				for _, c := range claims {
					assert.NoError(t, c.Release(ctx))
				}
				assert.Equal(t, tt.replays, replays, "replays")
				assert.Len(t, claims, tt.claims, "claims")
				assert.Equal(t, tt.progress, progress, "in progress")
				assert.Equal(t, tt.reused, reused, "key reused")
				assert.Equal(t, tt.failed, failed, "failed")
				assert.Equal(t, tt.panics, panicked == 1, "the store's panic reaches its Begin's caller")
				assert.EqualValues(t, 1, store.asked.Load(), "the store asked once")
			})
		})
	}
}

// saveDown is a store whose saves fail while down is set.
type saveDown struct {
	idempotency.Store
	down atomic.Bool
}

func (s *saveDown) Complete(ctx context.Context, key string, claim, result idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		return errors.New("store down")
	}
	return s.Store.Complete(ctx, key, claim, result, ttl)
}

// TestCompleteLaterHoldsTheAnswerOneTryAtMost: with the store's saves
// failing, CompleteLater returns after the first try, not after the
// lease's worth of retries that Complete makes; the save goes on, and
// once the store is back the result is saved and replayed: one run.
func TestCompleteLaterHoldsTheAnswerOneTryAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &saveDown{Store: idempotency.NewMemoryStore(0)}
		var ev events
		g := idempotency.NewGuard(store, quiet(&ev, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond))...)
		claim, _, err := g.Begin(ctx, "alice", "k", "fp")
		require.NoError(t, err)
		store.down.Store(true)
		start := time.Now()
		claim.CompleteLater(ctx, idempotency.Record{Status: 201, Body: []byte("order 1")})
		assert.Less(t, time.Since(start), 100*time.Millisecond, "held for one try, not the lease")
		_, _, err = g.Begin(ctx, "alice", "k", "fp")
		assert.ErrorIs(t, err, idempotency.ErrInProgress, "the key held while the save goes on")
		time.Sleep(time.Second)
		store.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		_, stored, err := g.Begin(ctx, "alice", "k", "fp")
		require.NoError(t, err)
		require.NotNil(t, stored, "saved once the store was back")
		assert.Equal(t, "order 1", string(stored.Body))
	})
}
