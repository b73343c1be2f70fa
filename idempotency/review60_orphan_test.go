package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r60frozen wraps a store: while frozen every call waits for the thaw or
// its ctx; one whose ctx ends first is applied at the thaw, in order (a
// SIGSTOPped Redis).
type r60frozen struct {
	idempotency.Store
	mu       sync.Mutex
	frozen   bool
	thaw     chan struct{}
	queued   []func()
	calls    atomic.Int64
	releases atomic.Int64
}

func (s *r60frozen) freeze() {
	s.mu.Lock()
	s.frozen = true
	s.thaw = make(chan struct{})
	s.mu.Unlock()
}
func (s *r60frozen) unfreeze() {
	s.mu.Lock()
	s.frozen = false
	q := s.queued
	s.queued = nil
	close(s.thaw)
	s.mu.Unlock()
	for _, f := range q {
		f()
	}
}

func (s *r60frozen) do(ctx context.Context, f func() error) error {
	s.calls.Add(1)
	s.mu.Lock()
	if !s.frozen {
		s.mu.Unlock()
		return f()
	}
	thaw := s.thaw
	s.mu.Unlock()
	select {
	case <-thaw:
		return f()
	case <-ctx.Done():
		s.mu.Lock()
		if s.frozen {
			s.queued = append(s.queued, func() { _ = f() })
			s.mu.Unlock()
		} else {
			s.mu.Unlock()
			_ = f()
		}
		return ctx.Err()
	}
}

func (s *r60frozen) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	var rec atomic.Pointer[idempotency.Record] // written by a claim that lands after its caller gave up, too
	err := s.do(ctx, func() error { r, e := s.Store.Begin(context.Background(), key, claim, lease); rec.Store(r); return e })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return rec.Load(), err
}
func (s *r60frozen) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	return s.do(ctx, func() error { return s.Store.Renew(context.Background(), key, claim, lease) })
}
func (s *r60frozen) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return s.do(ctx, func() error { return s.Store.Complete(context.Background(), key, claim, rec, ttl) })
}
func (s *r60frozen) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.releases.Add(1)
	return s.do(ctx, func() error { return s.Store.Release(context.Background(), key, claim) })
}

// Many orphans across a long freeze: how long after the thaw until another
// replica can claim each key, how many store calls the reaping makes, and
// whether it stops.
func TestReview60OrphansLongFreeze(t *testing.T) {
	for _, n := range []int{1, 50, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := idempotency.NewMemoryStore(1 << 30)
				fs := &r60frozen{Store: mem}
				a := idempotency.NewGuard(fs, idempotency.Lease(30*time.Second), idempotency.StoreTimeout(500*time.Millisecond))
				b := idempotency.NewGuard(mem, idempotency.Lease(30*time.Second), idempotency.StoreTimeout(500*time.Millisecond))
				fs.freeze()
				var wg sync.WaitGroup
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						c, _, err := a.Begin(context.Background(), "s", fmt.Sprint("k", i), "fp")
						if c != nil {
							_ = c.Release(context.Background())
						}
						_ = err
					}(i)
				}
				wg.Wait()
				time.Sleep(10 * time.Second)
				rel := fs.releases.Load()
				start := time.Now()
				fs.unfreeze()
				// Replica b retries each key until it can claim it.
				var worst time.Duration
				for i := 0; i < n; i++ {
					for {
						c, rec, err := b.Begin(context.Background(), "s", fmt.Sprint("k", i), "fp")
						if err == nil && rec == nil && c != nil {
							_ = c.Release(context.Background())
							break
						}
						if time.Since(start) > 40*time.Second {
							t.Fatalf("key %d still held %v after thaw: %v", i, time.Since(start), err)
						}
						time.Sleep(10 * time.Millisecond)
					}
					if d := time.Since(start); d > worst {
						worst = d
					}
				}
				t.Logf("n=%d: releases during 10s freeze %d; all keys free %v after thaw", n, rel, worst)
				relAfter := fs.releases.Load()
				time.Sleep(2 * time.Minute)
				t.Logf("n=%d: releases in the 2 min after all keys freed: %d", n, fs.releases.Load()-relAfter)
				if worst > time.Second {
					t.Errorf("n=%d: a key stayed held %v after the thaw", n, worst)
				}
				// A round stops at the store's first failure: one try a
				// round (a store timeout, and one to the next round) while
				// it is frozen, not a claim after another a store timeout
				// each.
				if rel > 15 {
					t.Errorf("n=%d: %d releases against a store frozen 10 s", n, rel)
				}
			})
		})
	}
}
