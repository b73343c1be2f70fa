package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// outageStore is a memory store that, while down, fails (or, hanging, waits
// for its context to end) every call, and counts the calls it gets.
type outageStore struct {
	idempotency.Store
	hang   bool
	down   atomic.Bool
	calls  atomic.Int32
	begins atomic.Int32 // claims asked
}

func (s *outageStore) fail(ctx context.Context) error {
	s.calls.Add(1)
	if !s.down.Load() {
		return nil
	}
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("store down")
}

func (s *outageStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.begins.Add(1)
	if err := s.fail(ctx); err != nil {
		return nil, err
	}
	return s.Store.Begin(ctx, key, claim, lease)
}

func (s *outageStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, claim, lease)
}

func (s *outageStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, claim, rec, ttl)
}

func (s *outageStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, claim)
}

// kinds records the events a guard reports.
type kinds struct {
	mu   sync.Mutex
	seen []resilience.EventKind
}

func (k *kinds) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventStoreFailed {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = append(k.seen, e.Kind)
}

func (k *kinds) got() []resilience.EventKind {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]resilience.EventKind(nil), k.seen...)
}

// A store that fails gets keyed requests refused for FailOpenAfter, then
// they run on the guard's own records: claimed, replayed to repeats, and
// without waiting on a store that hangs, but for one request a second,
// which asks it; three of those in a row that it answers end this. With
// FailOpenAfter(-1), requests are refused for as long as the store fails.
func TestAFailingStoreFailsOpenAfterFailOpenAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hang  bool
		after time.Duration
	}{
		{name: "refuses", after: 2 * time.Second},
		{name: "hangs", hang: true, after: 2 * time.Second},
		{name: "never", after: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &outageStore{Store: idempotency.NewMemoryStore(0), hang: tc.hang}
				events := &kinds{}
				g := idempotency.NewGuard(store, idempotency.FailOpenAfter(tc.after), idempotency.StoreTimeout(100*time.Millisecond),
					idempotency.Lease(3*time.Second), idempotency.WithListener(events), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
				ctx := context.Background()
				store.down.Store(true)
				start := time.Now()
				n := 0
				begin := func() (*idempotency.Claim, *idempotency.Record, error, time.Duration) {
					n++
					at := time.Now()
					c, rec, err := g.Begin(ctx, "", "key-"+string(rune('a'+n)), "fp")
					return c, rec, err, time.Since(at)
				}

				_, _, err, _ := begin()
				require.Error(t, err, "refused at once")
				time.Sleep(1500 * time.Millisecond)
				_, _, err, _ = begin()
				require.Error(t, err, "refused within FailOpenAfter")
				time.Sleep(time.Second - time.Since(start)%time.Second + 200*time.Millisecond) // 2.2 s
				c, _, err, _ := begin()
				if tc.after < 0 {
					require.Error(t, err, "never fails open")
					assert.Empty(t, events.got())
					return
				}
				require.NoError(t, err, "runs on the guard's own records %v after the first failure", time.Since(start))
				require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("one")}))
				_, rec, err := g.Begin(ctx, "", "key-"+string(rune('a'+n)), "fp")
				require.NoError(t, err)
				require.NotNil(t, rec, "a repeat to this process is replayed")
				assert.Equal(t, "one", string(rec.Body))

				var slowest time.Duration
				asked := 0
				for range 20 { // 2 s, 10 a second: two of them ask the store
					time.Sleep(100 * time.Millisecond)
					before := store.begins.Load()
					c, _, err, took := begin()
					require.NoError(t, err)
					_ = c.Complete(ctx, idempotency.Record{Status: 201})
					if store.begins.Load() != before {
						asked++
					} else {
						slowest = max(slowest, took)
					}
				}
				assert.Equal(t, 2, asked, "one request a second asks the store")
				assert.Zero(t, slowest, "the others do not wait on it")

				store.down.Store(false)
				for range 35 { // 3 probes a second apart that the store answers end it
					time.Sleep(100 * time.Millisecond)
					c, _, err, _ = begin()
					require.NoError(t, err)
					require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
				}
				before := store.begins.Load()
				c, _, err, _ = begin()
				require.NoError(t, err)
				assert.Greater(t, store.begins.Load(), before, "back on the store")
				require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
				assert.Equal(t, []resilience.EventKind{resilience.EventSharedStateUnavailable, resilience.EventSharedStateRestored}, events.got())
			})
		})
	}
}

// Over HTTP: with the store down, keyed requests get 503 until
// FailOpenAfter, then run, and a repeat gets the replay.
func TestMiddlewareFailsOpen(t *testing.T) {
	store := &outageStore{Store: idempotency.NewMemoryStore(0)}
	store.down.Store(true)
	var runs atomic.Int32
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.FailOpenAfter(300*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _, _ := postKeyed(t, srv.Client(), srv.URL, "k")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	start := time.Now()
	for resp.StatusCode == http.StatusServiceUnavailable && time.Since(start) < 3*time.Second {
		time.Sleep(50 * time.Millisecond)
		resp, _, _ = postKeyed(t, srv.Client(), srv.URL, "k")
	}
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	t.Logf("ran %v after the first 503", time.Since(start))
	resp, body, _ := postKeyed(t, srv.Client(), srv.URL, "k")
	assert.Equal(t, "true", resp.Header.Get(idempotency.ReplayedHeader))
	assert.Equal(t, "order", body)
	assert.EqualValues(t, 1, runs.Load())
}

// Repeats of keys that ran on the local records are answered there, also
// once the store is back; while the guard has failed open, the request
// whose turn it is to ask the store, its key being the local records',
// asks with a claim of its own, so that the store's return is seen even
// when only such repeats come.
func TestRepeatsOfLocalKeysProbeTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{Store: idempotency.NewMemoryStore(0)}
		events := &kinds{}
		g := idempotency.NewGuard(store, idempotency.FailOpenAfter(0), idempotency.StoreTimeout(100*time.Millisecond),
			idempotency.WithListener(events), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
		ctx := context.Background()
		store.down.Store(true)
		c, _, err := g.Begin(ctx, "", "k", "fp")
		require.NoError(t, err, "failed open at once")
		require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("local")}))
		store.down.Store(false)
		for range 40 { // only repeats of k, 10 a second
			time.Sleep(100 * time.Millisecond)
			_, rec, err := g.Begin(ctx, "", "k", "fp")
			require.NoError(t, err)
			require.NotNil(t, rec)
			assert.Equal(t, "local", string(rec.Body), "replayed from the local records")
		}
		assert.Equal(t, []resilience.EventKind{resilience.EventSharedStateUnavailable, resilience.EventSharedStateRestored}, events.got())
		_, rec, err := g.Begin(ctx, "", "k", "fp")
		require.NoError(t, err)
		assert.Equal(t, "local", string(rec.Body), "and after")
	})
}

// beginOutage is a store whose claims (Begin) fail while down; its other
// calls get through.
type beginOutage struct {
	idempotency.Store
	down atomic.Bool
}

func (s *beginOutage) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.down.Load() {
		return nil, errors.New("store down")
	}
	return s.Store.Begin(ctx, key, claim, lease)
}

// A request claimed on the store before the guard failed open, whose
// result is saved there while it has, is replayed to its repeats to this
// process, which meanwhile claim on the local records: not run again.
func TestASaveOnTheStoreWhileFailedOpenIsReplayedLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &beginOutage{Store: idempotency.NewMemoryStore(0)}
		g := idempotency.NewGuard(store, idempotency.FailOpenAfter(time.Second), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
		ctx := context.Background()
		c, _, err := g.Begin(ctx, "", "k", "fp")
		require.NoError(t, err)
		store.down.Store(true)
		for i := range 3 { // other requests find the store down: the guard fails open
			time.Sleep(600 * time.Millisecond)
			other, _, err := g.Begin(ctx, "", fmt.Sprint("other-", i), "fp")
			if err == nil {
				require.NoError(t, other.Complete(ctx, idempotency.Record{Status: 201}))
			}
		}
		require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("first")}), "saved on the store")
		_, rec, err := g.Begin(ctx, "", "k", "fp")
		require.NoError(t, err)
		require.NotNil(t, rec, "replayed, not run again")
		assert.Equal(t, "first", string(rec.Body))
	})
}
