package idempotency_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r167Frozen is a store that can freeze as a kill -STOP'd Redis does: a
// call sent meanwhile does not answer (it times out on its context), and
// a Begin sent meanwhile is written when it thaws, with a lease from
// then, as the server reads it from its socket.
type r167Frozen struct {
	inner   *idempotency.MemoryStore
	mu      sync.Mutex
	frozen  bool
	pending []func()
	calls   atomic.Int64 // calls made while frozen
}

func (s *r167Frozen) wait(ctx context.Context, write func()) (bool, error) {
	s.mu.Lock()
	if !s.frozen {
		s.mu.Unlock()
		return false, nil
	}
	s.calls.Add(1)
	if write != nil {
		s.pending = append(s.pending, write)
	}
	s.mu.Unlock()
	<-ctx.Done()
	return true, ctx.Err()
}

func (s *r167Frozen) freeze() { s.mu.Lock(); s.frozen = true; s.mu.Unlock() }
func (s *r167Frozen) thaw() {
	s.mu.Lock()
	s.frozen = false
	p := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, w := range p {
		w()
	}
}

func (s *r167Frozen) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if f, err := s.wait(ctx, func() { _, _ = s.inner.Begin(context.Background(), key, claim, lease) }); f {
		return nil, err
	}
	return s.inner.Begin(ctx, key, claim, lease)
}
func (s *r167Frozen) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if f, err := s.wait(ctx, nil); f {
		return err
	}
	return s.inner.Renew(ctx, key, claim, lease)
}
func (s *r167Frozen) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if f, err := s.wait(ctx, nil); f {
		return err
	}
	return s.inner.Complete(ctx, key, claim, rec, ttl)
}
func (s *r167Frozen) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if f, err := s.wait(ctx, nil); f {
		return err
	}
	return s.inner.Release(ctx, key, claim)
}

const (
	r167Lease   = 600 * time.Millisecond
	r167Timeout = 100 * time.Millisecond
)

// Promise (CHANGELOG review165): a claim a Begin sent to a frozen store
// and gave up on is freed after the thaw even if the freeze was longer
// than the lease (up to 10 leases): a repeat on another replica is not
// refused for a whole lease after the thaw.
func TestReview167ReapAfterFreezeLongerThanLease(t *testing.T) {
	for _, leases := range []float64{0.5, 3, 8} {
		inner := idempotency.NewMemoryStore(1 << 20)
		s := &r167Frozen{inner: inner}
		g := idempotency.NewGuard(s, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(-1))
		other := idempotency.NewGuard(inner, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(-1))
		s.freeze()
		if _, _, err := g.Begin(context.Background(), "", "k", "fp"); err == nil {
			t.Fatal("a frozen store's Begin succeeded")
		}
		time.Sleep(time.Duration(leases * float64(r167Lease)))
		thawed := time.Now()
		s.thaw()
		// The reaping's wait is at most max(lease/12, store timeout)
		// after the thaw: the key must be free well within the lease.
		var got bool
		for time.Since(thawed) < r167Lease*3/4 {
			c, _, err := other.Begin(context.Background(), "", "k", "fp")
			if err == nil && c != nil {
				got = true
				_ = c.Complete(context.Background(), idempotency.Record{Status: 200})
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !got {
			t.Errorf("freeze of %.1f leases: the orphan claim was not freed within 3/4 of a lease of the thaw", leases)
		}
	}
}

// Promise: no unbounded reaping while the store is down for ever: the
// reaping's store calls stop after 10 leases at most.
func TestReview167ReapStopsWhileStoreDownForEver(t *testing.T) {
	inner := idempotency.NewMemoryStore(1 << 20)
	s := &r167Frozen{inner: inner}
	g := idempotency.NewGuard(s, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(-1))
	s.freeze()
	for _, k := range []string{"a", "b", "c"} {
		_, _, _ = g.Begin(context.Background(), "", k, "fp")
	}
	time.Sleep(10*r167Lease + 3*r167Timeout)
	before := s.calls.Load()
	time.Sleep(3 * r167Lease)
	if after := s.calls.Load(); after != before {
		t.Errorf("store calls went on past 10 leases of a store down for ever: %d more in 3 leases", after-before)
	}
	runtime.KeepAlive(g)
}

// Promise: a dropped Guard is still garbage-collected within a bounded
// time (the reaping's timers hold it for 10 leases at most).
func TestReview167DroppedGuardCollected(t *testing.T) {
	inner := idempotency.NewMemoryStore(1 << 20)
	s := &r167Frozen{inner: inner}
	var collected atomic.Bool
	func() {
		g := idempotency.NewGuard(s, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(-1))
		runtime.AddCleanup(g, func(*atomic.Bool) { collected.Store(true) }, &collected)
		s.freeze()
		_, _, _ = g.Begin(context.Background(), "", "k", "fp")
	}()
	deadline := time.Now().Add(10*r167Lease + 2*time.Second)
	for time.Now().Before(deadline) && !collected.Load() {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
	if !collected.Load() {
		t.Error("a dropped guard, reaping a claim on a store down for ever, was not collected within 10 leases and 2 s")
	}
}

// Promise: the reaping never frees a claim that a live request holds.
// With FailOpenAfter(0), a Begin that the frozen store fails runs its
// request on the guard's local records with the same claim (token) it
// sent the store, which the reaping then frees from the store after the
// thaw, while that request still runs: a repeat on another replica, after
// the guard's outage has ended, runs it a second time.
func TestReview167ReapFreesTheTokenOfARequestRunningLocally(t *testing.T) {
	inner := idempotency.NewMemoryStore(1 << 20)
	s := &r167Frozen{inner: inner}
	g := idempotency.NewGuard(s, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(0))
	other := idempotency.NewGuard(inner, idempotency.Lease(r167Lease), idempotency.StoreTimeout(r167Timeout), idempotency.FailOpenAfter(-1))
	s.freeze()
	c, _, err := g.Begin(context.Background(), "", "k", "fp")
	if err != nil || c == nil {
		t.Skipf("the guard did not fail open at once: %v", err)
	}
	defer c.Complete(context.Background(), idempotency.Record{Status: 200})
	time.Sleep(200 * time.Millisecond)
	s.thaw() // the store now holds c's own claim (c's token), lease from now
	// Immediately after the thaw, the store holds c's token: the
	// request running with it is live.
	time.Sleep(r167Lease / 2)
	rc, rec, err := other.Begin(context.Background(), "", "k", "fp")
	if err == nil && rc != nil {
		_ = rc.Complete(context.Background(), idempotency.Record{Status: 200})
		t.Errorf("the reaping freed, within half a lease of the thaw, the claim whose token a live request (run on the guard's local records) holds: a repeat on another replica ran it again")
	} else if !errors.Is(err, idempotency.ErrInProgress) {
		t.Logf("other replica: %v %v", rec, err)
	}
}
