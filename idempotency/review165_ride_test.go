package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r165Outage is a store down from `from` to `to` (fake time): refusing at
// once, or hanging as a frozen Redis does (a call waits; at the thaw it
// is applied, whether or not its caller is still waiting, as commands in
// a frozen server's socket are).
type r165Outage struct {
	inner    idempotency.Store
	from, to time.Time
	hang     bool
	late     sync.WaitGroup
}

var errR165Down = errors.New("store down")

func (o *r165Outage) do(ctx context.Context, op func(context.Context) error) error {
	now := time.Now()
	if now.Before(o.from) || !now.Before(o.to) {
		return op(ctx)
	}
	if !o.hang {
		return errR165Down
	}
	t := time.NewTimer(time.Until(o.to))
	defer t.Stop()
	select {
	case <-t.C:
		return op(ctx)
	case <-ctx.Done():
		o.late.Go(func() { // applied at the thaw, its answer lost
			time.Sleep(time.Until(o.to))
			_ = op(context.Background())
		})
		return ctx.Err()
	}
}

func (o *r165Outage) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (rec *idempotency.Record, err error) {
	var mu sync.Mutex // a Begin applied at the thaw writes found late
	var found *idempotency.Record
	err = o.do(ctx, func(ctx context.Context) error {
		r, e := o.inner.Begin(ctx, key, claim, lease)
		mu.Lock()
		defer mu.Unlock()
		found = r
		return e
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return found, nil
}
func (o *r165Outage) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	return o.do(ctx, func(ctx context.Context) error { return o.inner.Renew(ctx, key, claim, lease) })
}
func (o *r165Outage) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	return o.do(ctx, func(ctx context.Context) error { return o.inner.Complete(ctx, key, claim, rec, ttl) })
}
func (o *r165Outage) Release(ctx context.Context, key string, claim idempotency.Record) error {
	return o.do(ctx, func(ctx context.Context) error { return o.inner.Release(ctx, key, claim) })
}

// Lease's doc and docs/idempotency.md ("The exact condition"): "any
// outage shorter than two thirds of the lease less min(Lease/12,
// StoreTimeout/2) is ridden through wherever it falls" (for a store that
// hangs, less a StoreTimeout more). Swept over where it falls, from
// before the handler begins its second lease to after it ends, with a
// second replica retrying throughout: one run, and the result stored
// (no EventNotStored, no EventLeaseLost).
func TestReview165OutageShorterThanTheBoundIsRiddenThroughWhereverItFalls(t *testing.T) {
	const lease, st = 3 * time.Second, 100 * time.Millisecond
	const handler = 4 * time.Second
	for _, hang := range []bool{false, true} {
		d := 2*lease/3 - min(lease/12, st/2) - 10*time.Millisecond
		if hang {
			d -= st
		}
		bad := 0
		for at := 10 * time.Millisecond; at < handler+lease; at += 97 * time.Millisecond {
			runs, notStored, lost, answered := r165Ride(t, lease, st, handler, at, d, hang)
			if runs != 1 || notStored+lost > 0 || !answered {
				bad++
				if bad <= 5 {
					t.Errorf("hang %v, outage of %v from %v: %d runs, %d not stored, %d lease lost, repeat answered %v", hang, d, at, runs, notStored, lost, answered)
				}
			}
		}
		if bad > 0 {
			t.Errorf("hang %v: %d offsets broke the ride-through bound", hang, bad)
		}
	}
}

func r165Ride(t *testing.T, lease, st, handler, at, d time.Duration, hang bool) (runs, notStored, lost int, answered bool) {
	synctest.Test(t, func(t *testing.T) {
		mem := idempotency.NewMemoryStore(0)
		start := time.Now()
		store := &r165Outage{inner: mem, from: start.Add(at), to: start.Add(at + d), hang: hang}
		var ns, ll atomic.Int32
		l := resilience.ListenerFunc(func(e resilience.Event) {
			switch e.Kind {
			case resilience.EventNotStored:
				ns.Add(1)
			case resilience.EventLeaseLost:
				ll.Add(1)
			}
		})
		opts := []idempotency.Option{idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1), idempotency.WithListener(l)}
		a := idempotency.NewGuard(store, opts...)
		b := idempotency.NewGuard(store, opts...)
		var n atomic.Int32
		var wg sync.WaitGroup
		wg.Go(func() {
			claim, _, err := a.Begin(context.Background(), "s", "k", "fp")
			if claim == nil {
				t.Logf("first Begin: %v", err)
				return
			}
			n.Add(1)
			time.Sleep(handler)
			_ = claim.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("A")})
		})
		time.Sleep(time.Millisecond)
		wg.Go(func() {
			for i := 0; time.Since(start) < handler+3*lease; i++ {
				claim, rec, _ := b.Begin(context.Background(), "s", "k", "fp")
				if claim != nil {
					n.Add(1)
					_ = claim.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte(fmt.Sprint("B", i))})
					answered = true
					return
				}
				if rec != nil {
					answered = string(rec.Body) == "A"
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		wg.Wait()
		store.late.Wait()
		runs, notStored, lost = int(n.Load()), int(ns.Load()), int(ll.Load())
	})
	return
}
