package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r116Store is a store that fails chosen calls: all of them (down), the
// keys a predicate picks (a shard down), or the next n Begins of one key
// (a transient error: a connection reset).
type r116Store struct {
	inner    *idempotency.MemoryStore
	mu       sync.Mutex
	down     bool
	shard    func(key string) bool
	failNext map[string]int // key suffix -> Begins to fail
}

var errR116 = errors.New("r116: store failed")

func newR116Store() *r116Store {
	return &r116Store{inner: idempotency.NewMemoryStore(0), failNext: map[string]int{}}
}

func (s *r116Store) fail(key string, begin bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down || s.shard != nil && s.shard(key) {
		return true
	}
	if !begin {
		return false
	}
	for k, n := range s.failNext {
		if n > 0 && strings.HasSuffix(key, ":"+k) {
			s.failNext[k] = n - 1
			return true
		}
	}
	return false
}

func (s *r116Store) setDown(d bool) { s.mu.Lock(); s.down = d; s.mu.Unlock() }
func (s *r116Store) failOnce(key string) {
	s.mu.Lock()
	s.failNext[key]++
	s.mu.Unlock()
}

func (s *r116Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.fail(key, true) {
		return nil, errR116
	}
	return s.inner.Begin(ctx, key, claim, lease)
}
func (s *r116Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.fail(key, false) {
		return errR116
	}
	return s.inner.Renew(ctx, key, claim, lease)
}
func (s *r116Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.fail(key, false) {
		return errR116
	}
	return s.inner.Complete(ctx, key, claim, rec, ttl)
}
func (s *r116Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.fail(key, false) {
		return errR116
	}
	return s.inner.Release(ctx, key, claim)
}

// r116Run asks g to run key once: it reports "ran" if the claim was got
// (and completes it with a 201), "replayed", or the error's text.
func r116Run(g *idempotency.Guard, key string, runs map[string]int) string {
	c, rec, err := g.Begin(context.Background(), "alice", key, "fp")
	switch {
	case err != nil:
		return err.Error()
	case rec != nil:
		return "replayed"
	}
	runs[key]++
	_ = c.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("order")})
	return "ran"
}

// An outage ends; the store is healthy for 30 s (thousands of claims
// answered); one claim of an unrelated key gets one transient error. The
// guard must not fail open on that: a key completed on the store must be
// replayed, never run again. (docs/idempotency.md: the cost of failing
// open is paid "only after FailOpenAfter", for a store that is down.)
func TestReview116_OneTransientErrorAfterAnOutageRunsAStoredKeyAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR116Store()
		g := idempotency.NewGuard(s, idempotency.FailOpenAfter(2*time.Second), idempotency.WithLogger(discardLogger()))
		runs := map[string]int{}
		// A real outage: 5 s down, claims failing every 100 ms.
		s.setDown(true)
		for i := range 50 {
			r116Run(g, fmt.Sprintf("during-%d", i), runs)
			time.Sleep(100 * time.Millisecond)
		}
		s.setDown(false)
		// Back: probes end the outage within a few seconds.
		for i := range 100 {
			r116Run(g, fmt.Sprintf("after-%d", i), runs)
			time.Sleep(100 * time.Millisecond)
		}
		// Healthy: the order is run on the store.
		if got := r116Run(g, "order-1", runs); got != "ran" {
			t.Fatalf("order-1 first run: %s", got)
		}
		for i := range 200 { // 20 s of healthy traffic, 10 claims a second
			if got := r116Run(g, fmt.Sprintf("healthy-%d", i), runs); got != "ran" {
				t.Fatalf("healthy claim %d: %s", i, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// One transient error on one claim of another key.
		s.failOnce("blip")
		r116Run(g, "blip", runs)
		// The client of order-1 retries (its answer was lost).
		got := r116Run(g, "order-1", runs)
		if runs["order-1"] != 1 {
			t.Errorf("order-1 ran %d times (retry: %s): one transient store error 30 s after an outage ended failed the whole guard open, and a key stored on a healthy store ran again", runs["order-1"], got)
		}
	})
}

// A key completed on the store; two of its repeats, 12 s apart, each get
// one transient error (the store answering every other claim meanwhile).
// The key's claims have not failed "without a break" for FailOpenAfter in
// any sense a store outage would: the second repeat must not run it again.
func TestReview116_TwoTransientErrorsOfAKeyRunItAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR116Store()
		g := idempotency.NewGuard(s, idempotency.WithLogger(discardLogger())) // FailOpenAfter 10 s by default
		runs := map[string]int{}
		if got := r116Run(g, "order-1", runs); got != "ran" {
			t.Fatalf("first run: %s", got)
		}
		tick := func(d time.Duration) { // other traffic, all answered
			for i := 0; i < int(d/(100*time.Millisecond)); i++ {
				if got := r116Run(g, fmt.Sprintf("other-%d-%d", time.Now().UnixNano(), i), runs); got != "ran" {
					t.Fatalf("other: %s", got)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		tick(5 * time.Second)
		s.failOnce("order-1")
		if got := r116Run(g, "order-1", runs); got == "ran" || got == "replayed" {
			t.Fatalf("first repeat was to fail: %s", got)
		}
		tick(12 * time.Second)
		s.failOnce("order-1")
		got := r116Run(g, "order-1", runs)
		if runs["order-1"] != 1 {
			t.Errorf("order-1 ran %d times (second repeat: %s): two transient errors of its claims 12 s apart, the store healthy throughout, ran a stored key again", runs["order-1"], got)
		}
	})
}

// r116Every is the seconds between a client's retries.
var r116Every = 2

// r116Shard picks the keys of one shard of ten.
func r116Shard(key string) bool {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()%10 == 0
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// scopeKeyForTest is the guard's scoped key (key.go's scopeKey).
func scopeKeyForTest(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + ":" + key
}

// A quiet service: a key completed on the store; minutes later one claim
// gets a transient error, and, minutes after that, another does. No
// claim between them failed or was answered (no traffic). The guard
// counts that as its store failing "without a break" for minutes and
// fails open on the second error: a repeat of the stored key runs again.
func TestReview116_TwoTransientErrorsMinutesApartOnAQuietGuardFailItOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR116Store()
		g := idempotency.NewGuard(s, idempotency.WithLogger(discardLogger()))
		runs := map[string]int{}
		if got := r116Run(g, "order-1", runs); got != "ran" {
			t.Fatalf("first run: %s", got)
		}
		time.Sleep(time.Minute)
		s.failOnce("a")
		r116Run(g, "a", runs)
		time.Sleep(5 * time.Minute)
		s.failOnce("b")
		r116Run(g, "b", runs)
		got := r116Run(g, "order-1", runs) // the store answers this claim
		if runs["order-1"] != 1 {
			t.Errorf("order-1 ran %d times (repeat: %s): two transient errors 5 min apart, on a healthy store, failed the guard open", runs["order-1"], got)
		}
	})
}
