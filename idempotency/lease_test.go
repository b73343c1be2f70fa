package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// slowServer runs a handler that takes d, honouring its context, behind
// the middleware, and counts its runs.
type slowServer struct {
	runs, canceled atomic.Int64
	handler        http.Handler
	events         *events
}

type events struct {
	mu    sync.Mutex
	kinds []string
}

func (e *events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, ev.Kind.String())
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.kinds)
}

func newSlowServer(store idempotency.Store, d time.Duration, opts ...idempotency.Option) *slowServer {
	s := &slowServer{events: &events{}}
	opts = append(opts, idempotency.WithListener(s.events), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	s.handler = idempotency.Middleware(store, append([]idempotency.Option{idempotency.SharedKeys()}, opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			s.canceled.Add(1)
			http.Error(w, r.Context().Err().Error(), http.StatusServiceUnavailable) // nothing committed: the documented way to say so
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	return s
}

func (s *slowServer) post(ctx context.Context, key, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, key)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

// TestHandlerSlowerThanTheLeaseRunsOnce: the lease is renewed while the
// handler runs, so repeats get 409 and then the replay.
func TestHandlerSlowerThanTheLeaseRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Second, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))
		go s.post(t.Context(), "k", "")
		time.Sleep(500 * time.Millisecond)
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code, "still held after the lease")
		time.Sleep(time.Second)
		w := s.post(t.Context(), "k", "")
		assert.Equal(t, http.StatusCreated, w.Code)
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		for range 3 {
			s.post(t.Context(), "k", "")
		}
		assert.EqualValues(t, 1, s.runs.Load())
		assert.Empty(t, s.events.list())
	})
}

// flakyStore fails the calls its switches say, after delegating nothing.
type flakyStore struct {
	idempotency.Store
	failComplete, failRelease, failRenew atomic.Bool
	stealOnRenew                         atomic.Bool
}

var errStoreDown = errors.New("store down")

func (f *flakyStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if f.failComplete.Load() {
		return errStoreDown
	}
	return f.Store.Complete(ctx, key, claim, rec, ttl)
}

func (f *flakyStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if f.failRelease.Load() {
		return errStoreDown
	}
	return f.Store.Release(ctx, key, claim)
}

func (f *flakyStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if f.stealOnRenew.Load() { // another request takes the key over
		_ = f.Store.Release(ctx, key, claim)
		_, _ = f.Store.Begin(ctx, key, idempotency.Record{Fingerprint: claim.Fingerprint, Token: "thief"}, lease)
		return idempotency.ErrNotOwner
	}
	if f.failRenew.Load() {
		return errStoreDown
	}
	return f.Store.Renew(ctx, key, claim, lease)
}

// TestUnsavedResultIsReportedAndKeepsTheKeyForALease: a result that cannot
// be stored is reported, and kept on the guard's own records: repeats to
// this replica get its replay, during the lease (409 before review152) and
// after it (it ran again).
func TestUnsavedResultIsReportedAndKeepsTheKeyForALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.failComplete.Store(true)
		s := newSlowServer(store, 10*time.Millisecond, idempotency.Lease(30*time.Second))
		assert.Equal(t, http.StatusCreated, s.post(t.Context(), "k", "").Code)
		assert.Contains(t, s.events.list(), "not_stored")
		w := s.post(t.Context(), "k", "")
		assert.Equal(t, http.StatusCreated, w.Code, "no second run while the first's effect may stand")
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader), "replayed from this replica's records")
		time.Sleep(30 * time.Second)
		store.failComplete.Store(false)
		w = s.post(t.Context(), "k", "")
		assert.Equal(t, http.StatusCreated, w.Code)
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader), "replayed from this replica's records")
		assert.EqualValues(t, 1, s.runs.Load(), "one lease later, not run again here")
	})
}

// TestPanicWhileTheStoreIsDownFreesTheKeyAfterOneLease: the release fails
// and is reported; the key is runnable again one lease later, not minutes.
func TestPanicWhileTheStoreIsDownFreesTheKeyAfterOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.failRelease.Store(true)
		ev := &events{}
		h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithListener(ev), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }))
		post := func() (code int) {
			defer func() { _ = recover() }()
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		post()
		assert.Contains(t, ev.list(), "store_failed")
		assert.Equal(t, http.StatusConflict, post())
		time.Sleep(30 * time.Second)
		assert.Zero(t, post(), "the handler ran (and panicked) again")
	})
}

// TestLostLeaseCancelsTheHandlerAndIsReported.
func TestLostLeaseCancelsTheHandlerAndIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.stealOnRenew.Store(true)
		s := newSlowServer(store, time.Minute, idempotency.Lease(3*time.Second))
		w := s.post(t.Context(), "k", "")
		assert.EqualValues(t, 1, s.canceled.Load(), "the handler's context was canceled")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Contains(t, s.events.list(), "lease_lost")

		store.stealOnRenew.Store(false)
		store.failRenew.Store(true) // the store cannot renew until the lease runs out
		s2 := newSlowServer(store, time.Minute, idempotency.Lease(3*time.Second))
		s2.post(t.Context(), "k2", "")
		assert.Contains(t, s2.events.list(), "store_failed")
		assert.Contains(t, s2.events.list(), "lease_lost")
	})
}

// slowOnceStore's first Renew takes longer than the store timeout.
type slowOnceStore struct {
	idempotency.Store
	slowed atomic.Bool
}

func (s *slowOnceStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.slowed.CompareAndSwap(false, true) {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Renew(ctx, key, claim, lease)
}

// TestASlowRenewalIsTriedAgainInTime: one renewal that times out is tried
// again before the lease runs out; the key stays held, one run.
func TestASlowRenewalIsTriedAgainInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowOnceStore{Store: idempotency.NewMemoryStore(0)}
		s := newSlowServer(store, 900*time.Millisecond, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))
		go s.post(t.Context(), "k", "")
		time.Sleep(400 * time.Millisecond)
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code)
		time.Sleep(time.Second)
		assert.EqualValues(t, 1, s.runs.Load())
		assert.NotContains(t, s.events.list(), "lease_lost")
	})
}

// lostAnswerStore's first Complete succeeds but says it timed out.
type lostAnswerStore struct {
	idempotency.Store
	lost atomic.Bool
}

func (s *lostAnswerStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	err := s.Store.Complete(ctx, key, claim, rec, ttl)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return context.DeadlineExceeded
	}
	return err
}

func TestARetriedSaveThatHadGotThroughIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(&lostAnswerStore{Store: idempotency.NewMemoryStore(0)}, time.Millisecond)
		s.post(t.Context(), "k", "")
		assert.NotContains(t, s.events.list(), "not_stored")
		assert.Equal(t, "true", s.post(t.Context(), "k", "").Header().Get(idempotency.ReplayedHeader))
	})
}

// TestSaveIsRetriedWhileTheLeaseLasts: the store is down from just before
// the handler ends for 15 s of a 30 s lease (renewals and saves alike):
// the save is retried until it gets through, so the request runs once and
// its repeats are replayed; nothing is reported not stored.
func TestSaveIsRetriedWhileTheLeaseLasts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		s := newSlowServer(store, 11*time.Second, idempotency.Lease(30*time.Second))
		first := make(chan int)
		go func() { first <- s.post(t.Context(), "k", "").Code }()
		time.Sleep(10*time.Second + 500*time.Millisecond) // after the renewal at 10 s
		store.failComplete.Store(true)
		store.failRenew.Store(true)
		time.Sleep(15 * time.Second)
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code, "held meanwhile")
		store.failComplete.Store(false)
		store.failRenew.Store(false)
		assert.Equal(t, http.StatusCreated, <-first)
		w := s.post(t.Context(), "k", "")
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		assert.EqualValues(t, 1, s.runs.Load(), "one run")
		assert.NotContains(t, s.events.list(), "not_stored")
	})
}

// downStore fails every call while down.
type downStore struct {
	idempotency.Store
	down atomic.Bool
}

func (s *downStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.Store.Begin(ctx, key, claim, lease)
}

func (s *downStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Complete(ctx, key, claim, rec, ttl)
}

func (s *downStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Renew(ctx, key, claim, lease)
}

func (s *downStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Release(ctx, key, claim)
}

// TestSaveOutlastsAnOutageEndingJustBeforeTheLease: two replicas share a
// store; the store is down from 0.98 s for 990 ms (under two thirds of
// the 1.5 s lease), as the 1.2 s handler ends. The last renewal got
// through at 0.5 s, so the lease runs to 2.0 s, and the store is back at
// 1.97 s: renewals go on while the save waits, one gets through, and the
// save after it. A retry on the other replica later is replayed: one run.
func TestSaveOutlastsAnOutageEndingJustBeforeTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &downStore{Store: idempotency.NewMemoryStore(0)}
		opts := []idempotency.Option{idempotency.Lease(1500 * time.Millisecond), idempotency.StoreTimeout(100 * time.Millisecond)}
		a := newSlowServer(store, 1200*time.Millisecond, opts...)
		b := newSlowServer(store, 1200*time.Millisecond, opts...)
		first := make(chan int)
		go func() { first <- a.post(t.Context(), "k", "").Code }()
		time.Sleep(980 * time.Millisecond)
		store.down.Store(true)
		time.Sleep(990 * time.Millisecond)
		store.down.Store(false)
		assert.Equal(t, http.StatusCreated, <-first)
		time.Sleep(3 * time.Second) // past any lease of the first
		w := b.post(t.Context(), "k", "")
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		assert.EqualValues(t, 1, a.runs.Load()+b.runs.Load(), "one run")
		assert.NotContains(t, a.events.list(), "not_stored")
		assert.NotContains(t, a.events.list(), "lease_lost")
	})
}

// TestLeaseDeadlineFollowsRenewals: a context taken by WithLeaseDeadline
// as the handler begins lasts while the lease is renewed (a 2 s handler,
// a 1.5 s lease), its Deadline the lease's current end; it ends with
// DeadlineExceeded once the lease is no longer renewed and runs out.
func TestLeaseDeadlineFollowsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := idempotency.NewGuard(nil, idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond),
			idempotency.WithLogger(slog.New(slog.DiscardHandler)))
		claim, _, err := g.Begin(t.Context(), "", "k", "fp")
		if !assert.NoError(t, err) {
			return
		}
		ctx, cancel := claim.WithLeaseDeadline(t.Context())
		defer cancel()
		time.Sleep(2250 * time.Millisecond) // between two renewals, not at one: both read the lease alike
		assert.NoError(t, ctx.Err(), "the lease was renewed meanwhile")
		d, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, claim.LeaseDeadline(), d)
		assert.True(t, d.After(time.Now()))
		claim.Completed() // no more renewals
		time.Sleep(1500 * time.Millisecond)
		<-ctx.Done()
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		assert.NoError(t, claim.Complete(t.Context(), idempotency.Record{Status: 201}))
	})
}
