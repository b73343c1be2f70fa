package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// review168Frozen is a store that, frozen, holds every call until it
// thaws and then applies it (a frozen Redis keeps the command in its
// socket and runs it at the thaw), while the caller gives up at its
// context's end.
type review168Frozen struct {
	inner *idempotency.MemoryStore
	mu    sync.Mutex
	thaw  chan struct{} // nil: not frozen
}

func (s *review168Frozen) freeze() { s.mu.Lock(); s.thaw = make(chan struct{}); s.mu.Unlock() }
func (s *review168Frozen) unfreeze() {
	s.mu.Lock()
	close(s.thaw)
	s.thaw = nil
	s.mu.Unlock()
}

func (s *review168Frozen) do(ctx context.Context, f func(context.Context) error) error {
	s.mu.Lock()
	th := s.thaw
	s.mu.Unlock()
	if th == nil {
		return f(ctx)
	}
	res := make(chan error, 1)
	go func() {
		<-th
		res <- f(context.Background())
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *review168Frozen) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	var found *idempotency.Record
	err := s.do(ctx, func(ctx context.Context) error {
		var err error
		found, err = s.inner.Begin(ctx, key, claim, lease)
		return err
	})
	return found, err
}

func (s *review168Frozen) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	return s.do(ctx, func(ctx context.Context) error { return s.inner.Renew(ctx, key, claim, lease) })
}

func (s *review168Frozen) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return s.do(ctx, func(ctx context.Context) error { return s.inner.Complete(ctx, key, claim, rec, ttl) })
}

func (s *review168Frozen) Release(ctx context.Context, key string, claim idempotency.Record) error {
	return s.do(ctx, func(ctx context.Context) error { return s.inner.Release(ctx, key, claim) })
}

// review168: replica A's store freezes as a request claims its key; the
// guard fails open (FailOpenAfter(0)) and the request runs on A's own
// records, and completes there in 200 ms. The store thaws 1 s later and
// writes the claim, with a lease (3 s) from then. Since review167 that
// claim is no orphan: nobody frees it. A repeat to replica B after the
// thaw then gets 409 for a whole lease (and runs again after it: the
// fail-open cost the docs state). review165 promised that a claim a frozen
// store writes at its thaw does not hold a repeat off for a lease; the
// docs' table (freeze as a request is claimed) says the replica frees it.
func TestReview168FailedOpenClaimHoldsKeyForALeaseAfterThaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &review168Frozen{inner: idempotency.NewMemoryStore(0)}
		opts := []idempotency.Option{idempotency.Lease(3 * time.Second), idempotency.StoreTimeout(100 * time.Millisecond), idempotency.FailOpenAfter(0)}
		a := idempotency.NewGuard(st, opts...)
		b := idempotency.NewGuard(st, opts...)
		st.freeze()
		c, rec, err := a.Begin(context.Background(), "s", "K", "fp")
		if err != nil || rec != nil || c == nil {
			t.Fatalf("A's Begin on a frozen store, FailOpenAfter(0): claim %v rec %v err %v", c, rec, err)
		}
		if !c.Local() {
			t.Fatalf("A's claim is not local")
		}
		time.Sleep(200 * time.Millisecond) // the handler runs
		if err := c.Complete(context.Background(), idempotency.Record{Status: 200, Body: []byte("ok")}); err != nil {
			t.Logf("A's Complete: %v", err)
		}
		time.Sleep(800 * time.Millisecond)
		st.unfreeze()
		thawed := time.Now()
		var held time.Duration
		for {
			time.Sleep(100 * time.Millisecond)
			cb, _, err := b.Begin(context.Background(), "s", "K", "fp")
			if errors.Is(err, idempotency.ErrInProgress) {
				held = time.Since(thawed)
				continue
			}
			if cb != nil {
				_ = cb.Complete(context.Background(), idempotency.Record{Status: 200})
			}
			t.Logf("B after %v: claim %v err %v", time.Since(thawed), cb != nil, err)
			break
		}
		if held > time.Second {
			t.Fatalf("a repeat to replica B got 409 for %v after the thaw (lease 3 s), for a request that ran and completed on replica A 800 ms before the thaw: the claim its frozen Begin left holds the key", held)
		}
	})
}
