package idempotency_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// TestReview21MaxBodyMaxInt64KeepsTheBody: MaxBody accepts any n >= 1, so
// math.MaxInt64 ("no limit") is valid. The handler must get the body the
// client sent, as it would without the middleware.
func TestReview21MaxBodyMaxInt64KeepsTheBody(t *testing.T) {
	var got atomic.Value
	h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys(), idempotency.MaxBody(math.MaxInt64))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got.Store(string(b))
			w.WriteHeader(http.StatusCreated)
		}))
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"a","qty":3}`))
	r.Header.Set(idempotency.Header, "k-maxbody")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, `{"sku":"a","qty":3}`, got.Load(), "the handler must see the body the client sent")

	// And a different body under the same key must be refused as a reused key,
	// not replayed as if it were the same request.
	r = httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"b","qty":300}`))
	r.Header.Set(idempotency.Header, "k-maxbody")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code, "another payload under the key")
}

// hangingStore is a Store whose every call waits for its context to end, as
// a frozen server does, or for thaw to be closed (the end of the test).
type hangingStore struct{ thaw chan struct{} }

func (s hangingStore) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.thaw:
		return errors.New("thawed")
	}
}

func (s hangingStore) Begin(ctx context.Context, _ string, _ idempotency.Record, _ time.Duration) (*idempotency.Record, error) {
	return nil, s.wait(ctx)
}
func (s hangingStore) Renew(ctx context.Context, _ string, _ idempotency.Record, _ time.Duration) error {
	return s.wait(ctx)
}
func (s hangingStore) Complete(ctx context.Context, _ string, _, _ idempotency.Record, _ time.Duration) error {
	return s.wait(ctx)
}
func (s hangingStore) Release(ctx context.Context, _ string, _ idempotency.Record) error {
	return s.wait(ctx)
}

// TestReview21StoreTimeoutOverLeaseIsRefused: "It panics if the lease is
// under three store timeouts" (Middleware, NewGuard). A StoreTimeout of
// 2^62 ns (146 years) is far over the default 30 s lease; 3*2^62 overflows
// int64 and the check passes. With a frozen store the request then hangs
// with no bound: "a store that fails or hangs gets a new request a 503
// with Retry-After within about a second".
func TestReview21StoreTimeoutOverLeaseIsRefused(t *testing.T) {
	store := hangingStore{thaw: make(chan struct{})}
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.StoreTimeout(1 << 62)}
	var mw func(http.Handler) http.Handler
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		mw = idempotency.Middleware(store, opts...)
		return false
	}()
	if panicked {
		return // refused, as documented
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("x"))
	r.Header.Set(idempotency.Header, "k-overflow")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); h.ServeHTTP(w, r) }()
	select {
	case <-done:
		t.Logf("answered %d", w.Code)
	case <-time.After(3 * time.Second):
		cancel() // the client leaves: the store call does not care (WithoutCancel)
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Errorf("Middleware accepted StoreTimeout(2^62) under the default 30 s Lease (3*2^62 overflows): a frozen store held the request with no answer for 3 s, and 1 s more after its client left")
		}
	}
	close(store.thaw)
	<-done
}
