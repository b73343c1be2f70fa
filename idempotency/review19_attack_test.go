package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r19SlowStore answers each call after delay; the first Begin of key "gone"
// takes the key and then fails as timed out (leaving an orphan).
type r19SlowStore struct {
	*idempotency.MemoryStore
	delay  time.Duration
	slow   atomic.Bool
	orphan atomic.Bool
}

func (s *r19SlowStore) wait(ctx context.Context) {
	if s.slow.Load() {
		time.Sleep(s.delay)
	}
}

func (s *r19SlowStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.orphan.CompareAndSwap(true, false) {
		_, _ = s.MemoryStore.Begin(context.Background(), key, claim, lease)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.wait(ctx)
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

func (s *r19SlowStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.wait(ctx)
	return s.MemoryStore.Release(ctx, key, claim)
}

// After an orphan is freed by a slow store (each call just under the
// store timeout), the claim Begin returns has a lease the guard believes
// is already (almost) over, though the store's runs a whole lease from
// the last Begin: WithLeaseDeadline ends the handler's transaction at once.
func TestReview19OrphanLoopLeaseAlreadyOver(t *testing.T) {
	st := &r19SlowStore{MemoryStore: idempotency.NewMemoryStore(0), delay: 280 * time.Millisecond}
	g := idempotency.NewGuard(st, idempotency.Lease(900*time.Millisecond), idempotency.StoreTimeout(300*time.Millisecond))
	ctx := context.Background()
	st.orphan.Store(true)
	if _, _, err := g.Begin(ctx, "s", "k", "f"); err == nil {
		t.Fatal("first Begin should fail")
	}
	st.slow.Store(true)
	c, rec, err := g.Begin(ctx, "s", "k", "f")
	if err != nil || rec != nil || c == nil {
		t.Fatalf("second Begin: %v %v", rec, err)
	}
	st.slow.Store(false)
	defer c.Release(ctx)
	left := time.Until(c.LeaseDeadline())
	t.Logf("lease left as Begin returned: %v (lease 900ms)", left)
	tx, cancel := c.WithLeaseDeadline(ctx)
	defer cancel()
	select {
	case <-tx.Done():
		t.Fatalf("the handler's transaction context ended %v after Begin returned a fresh claim: %v (its store lease is whole)", time.Until(c.LeaseDeadline())*-1+left, tx.Err())
	case <-time.After(400 * time.Millisecond):
	}
	if left < 300*time.Millisecond {
		t.Fatalf("a fresh claim's lease has only %v left of 900ms, less than a store timeout", left)
	}
}

// A lease of 292 years: deadline in the future, context alive, renewals ok.
func TestReview19HugeLease(t *testing.T) {
	g := idempotency.NewGuard(nil, idempotency.Lease(math.MaxInt64), idempotency.StoreTimeout(time.Second))
	c, _, err := g.Begin(context.Background(), "s", "k", "f")
	if err != nil {
		t.Fatal(err)
	}
	if !c.LeaseDeadline().After(time.Now().Add(100 * 365 * 24 * time.Hour)) {
		t.Fatalf("deadline %v", c.LeaseDeadline())
	}
	ctx, cancel := c.WithLeaseDeadline(context.Background())
	d, ok := ctx.Deadline()
	time.Sleep(50 * time.Millisecond)
	if ctx.Err() != nil || !ok || d.Before(time.Now()) {
		t.Fatalf("ctx %v %v %v", ctx.Err(), d, ok)
	}
	cancel()
	if err := c.Complete(context.Background(), idempotency.Record{Status: 200}); err != nil {
		t.Fatal(err)
	}
	_, rec, err := g.Begin(context.Background(), "s", "k", "f")
	if err != nil || rec == nil {
		t.Fatal(rec, err)
	}
}

func r19serve(t *testing.T, h http.Handler, method, key string) (*http.Response, string) {
	srv := httptest.NewServer(idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.MaxResponse(16), idempotency.Methods(method))(h))
	t.Cleanup(srv.Close)
	do := func() (*http.Response, string) {
		req, _ := http.NewRequest(method, srv.URL, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	r1, b1 := do()
	t.Logf("first: %d %q", r1.StatusCode, b1)
	return do()
}

// A 204 whose handler wrote a body larger than MaxResponse: the client got
// a whole 204 (no body), but the body, never sent, counts against the
// limit: the repeat gets 500 not replayable.
func TestReview19NoContentBigBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		_, _ = w.Write(bytes.Repeat([]byte("a"), 100))
	})
	r2, b2 := r19serve(t, h, http.MethodPost, "k204")
	if r2.StatusCode != http.StatusNoContent {
		t.Fatalf("repeat of a 204: %d %q", r2.StatusCode, b2)
	}
}

func TestReview19NotModifiedBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotModified)
		_, _ = w.Write([]byte("abc"))
	})
	r2, b2 := r19serve(t, h, http.MethodPost, "k304")
	if r2.StatusCode != http.StatusNotModified || b2 != "" {
		t.Fatalf("repeat of a 304: %d %q", r2.StatusCode, b2)
	}
}

// What is stored for a 204 with a body written: should be no body.
type r19SpyStore struct {
	*idempotency.MemoryStore
	last atomic.Pointer[idempotency.Record]
}

func (s *r19SpyStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	s.last.Store(&rec)
	return s.MemoryStore.Complete(ctx, key, claim, rec, ttl)
}

func TestReview19NoContentStoredBody(t *testing.T) {
	st := &r19SpyStore{MemoryStore: idempotency.NewMemoryStore(0)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		_, _ = w.Write([]byte("hello"))
	})
	srv := httptest.NewServer(idempotency.Middleware(st, idempotency.SharedKeys())(h))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "a")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(50 * time.Millisecond)
	if rec := st.last.Load(); rec == nil || len(rec.Body) != 0 {
		t.Fatalf("stored for a 204: %+v body %q", rec, rec.Body)
	}
}
