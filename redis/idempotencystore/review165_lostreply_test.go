package idempotencystore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r165Events struct {
	mu sync.Mutex
	ev []resilience.Event
}

func (e *r165Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = append(e.ev, ev)
}

func (e *r165Events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.ev {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

// A lost reply: the command ran on the server, its answer never came.
// Exactly once: the claim is the holder's, the save is recognised as
// done, a repeat gets the replay, nothing runs twice.
func TestReview165LostReplies(t *testing.T) {
	const lease, st = 6 * time.Second, 200 * time.Millisecond
	for _, hang := range []bool{false, true} {
		name := "reset"
		if hang {
			name = "silent"
		}
		t.Run("save/"+name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := newR165Proxy(t, srv.Addr())
			ev := &r165Events{}
			ga := idempotency.NewGuard(idempotencystore.New(r165Client(t, p.Addr()), ""),
				idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1), idempotency.WithListener(ev))
			gb := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""),
				idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
			claim, _, err := ga.Begin(t.Context(), "s", "k", "fp")
			if claim == nil {
				t.Fatalf("Begin: %v", err)
			}
			p.Arm(`"done":true`, hang)
			start := time.Now()
			err = claim.Complete(t.Context(), idempotency.Record{Status: 201, Body: []byte("order 1")})
			took := time.Since(start)
			if p.lost.Load() == 0 {
				t.Fatal("no reply was lost: the trigger did not fire")
			}
			if err != nil {
				t.Errorf("Complete after a lost reply: %v (took %v)", err, took)
			}
			if took > 4*st {
				t.Errorf("Complete took %v after a lost reply (store timeout %v)", took, st)
			}
			if n := ev.count(resilience.EventNotStored); n > 0 {
				t.Errorf("%d EventNotStored for a save that got through", n)
			}
			c, rec, err := gb.Begin(t.Context(), "s", "k", "fp")
			if c != nil {
				c.Release(context.Background())
				t.Fatal("the repeat ran again after a lost save reply")
			}
			if err != nil || rec == nil || rec.Status != 201 || string(rec.Body) != "order 1" {
				t.Errorf("the repeat got %v, %v; want the replay of 201 order 1", rec, err)
			}
		})
		t.Run("claim/"+name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := newR165Proxy(t, srv.Addr())
			ga := idempotency.NewGuard(idempotencystore.New(r165Client(t, p.Addr()), ""),
				idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
			gb := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""),
				idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
			// warm: the policy read and a pooled connection
			if c, _, err := ga.Begin(t.Context(), "s", "warm", "w"); c != nil {
				_ = c.Release(t.Context())
			} else {
				t.Fatal(err)
			}
			p.Arm(`"fp":"fp165"`, hang)
			runs := 0
			claimA, _, errA := ga.Begin(t.Context(), "s", "k", "fp165")
			lostAt := time.Now()
			if p.lost.Load() == 0 {
				t.Fatal("no reply was lost: the trigger did not fire")
			}
			if claimA != nil {
				runs++
				if err := claimA.Complete(t.Context(), idempotency.Record{Status: 201, Body: []byte("A")}); err != nil {
					t.Errorf("A's Complete: %v", err)
				}
			} else if !hang {
				t.Errorf("a SET NX resent after its reply was lost was refused its own claim: %v", errA)
			}
			// The client retries on the other replica every 50 ms: it must
			// get an answer (the replay, or a run if A never ran) well
			// before the lease, and the request runs once.
			var got *idempotency.Record
			var waited time.Duration
			for time.Since(lostAt) < lease {
				c, rec, err := gb.Begin(t.Context(), "s", "k", "fp165")
				if c != nil {
					runs++
					_ = c.Complete(t.Context(), idempotency.Record{Status: 201, Body: []byte("B")})
					waited = time.Since(lostAt)
					break
				}
				if rec != nil {
					got, waited = rec, time.Since(lostAt)
					break
				}
				if !errors.Is(err, idempotency.ErrInProgress) {
					t.Logf("B: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("A: claim %v err %v; B answered after %v, replay %v", claimA != nil, errA, waited, got != nil)
			if runs != 1 {
				t.Errorf("%d runs after a lost claim reply", runs)
			}
			// A claim whose Begin gave up is freed by the reaping a store
			// timeout later (backing off): not held for the lease.
			if hang && (waited == 0 || waited > 2*time.Second) {
				t.Errorf("after a lost claim reply, the other replica waited %v (lease %v, store timeout %v)", waited, lease, st)
			}
			if got != nil && !strings.HasPrefix(string(got.Body), "A") {
				t.Errorf("replay %q", got.Body)
			}
		})
	}
}
