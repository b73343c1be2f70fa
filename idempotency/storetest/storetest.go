// Package storetest checks that an [idempotency.Store] keeps the contract
// the middleware relies on, as testing/fstest does for file systems. Use it
// from a test of your own store.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// Run runs the contract's tests against stores made by newStore. Keys are
// unique to the run, so a shared server needs no cleaning. It uses only
// package testing, so it adds no dependency to the module that calls it.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store, opts ...Option) {
	o := options{sleep: time.Sleep}
	for _, opt := range opts {
		opt(&o)
	}
	prefix := fmt.Sprintf("storetest-%d-", time.Now().UnixNano())
	t.Run("ClaimCompleteReplay", func(t *testing.T) { claimCompleteReplay(t, newStore(t), prefix) })
	t.Run("Release", func(t *testing.T) { release(t, newStore(t), prefix) })
	t.Run("ConcurrentRequestsRunOnce", func(t *testing.T) { concurrentRequestsRunOnce(t, newStore(t), prefix) })
	t.Run("LeaseRunsOutAndFences", func(t *testing.T) { leaseRunsOutAndFences(t, newStore(t), prefix, o.sleep) })
	t.Run("RenewKeepsTheLease", func(t *testing.T) { renewKeepsTheLease(t, newStore(t), prefix, o.sleep) })
	t.Run("HonoursTheContext", func(t *testing.T) { honoursTheContext(t, newStore(t), prefix) })
	if o.capacity > 0 {
		t.Run("FullOfClaimsInFlight", func(t *testing.T) { fullOfClaims(t, newStore(t), prefix, o.capacity) })
	}
}

// Option changes how [Run] runs the contract.
type Option func(*options)

type options struct {
	sleep    func(time.Duration)
	capacity int
}

// Capacity says the stores have room for n of the contract's claims and
// no more (for a store bounded in bytes, such as idempotency.MemoryStore,
// n claims of its keys), and adds the capacity
// case: a store full of claims in flight answers idempotency.ErrFull and
// keeps them, and completed records make room before claims. Default: the
// stores have no capacity to test (Redis, SQL).
func Capacity(n int) Option {
	return func(o *options) { o.capacity = n }
}

// Sleep sets how the lease cases let time pass on the store's clock.
// Default time.Sleep; a fake server's fast-forward (miniredis's) for a
// store whose clock does not run.
func Sleep(fn func(time.Duration)) Option {
	return func(o *options) { o.sleep = fn }
}

// lease is short, so that the lease cases take a fraction of a second of
// real time: a store keeps time on its own clock (Redis's, the database's).
const lease = 300 * time.Millisecond

// leaseRunsOutAndFences: a claim whose lease ran out can be claimed anew,
// and its first holder can then neither renew, complete nor release it.
func leaseRunsOutAndFences(t *testing.T, s idempotency.Store, prefix string, sleep func(time.Duration)) {
	ctx := context.Background()
	key := prefix + "lease"
	first := idempotency.Record{Fingerprint: "fp", Token: "first"}
	if found, err := s.Begin(ctx, key, first, lease); err != nil || found != nil {
		t.Fatalf("Begin = %+v, %v; want the claim", found, err)
	}
	sleep(lease + lease/2)
	second := idempotency.Record{Fingerprint: "fp", Token: "second"}
	if found, err := s.Begin(ctx, key, second, time.Minute); err != nil || found != nil {
		t.Fatalf("Begin after the lease ran out = %+v, %v; want a new claim", found, err)
	}
	done := idempotency.Record{Fingerprint: "fp", Done: true, Status: 201}
	if err := s.Renew(ctx, key, first, time.Minute); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("Renew by the first holder = %v; want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, key, first, done, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("Complete by the first holder = %v; want ErrNotOwner: its token is fenced off", err)
	}
	if err := s.Release(ctx, key, first); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("Release by the first holder = %v; want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, key, second, done, time.Hour); err != nil {
		t.Errorf("Complete by the second holder = %v", err)
	}
	if err := s.Renew(ctx, key, second, time.Minute); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("Renew of a completed claim = %v; want ErrNotOwner", err)
	}
}

// renewKeepsTheLease: a claim renewed before its lease runs out is still
// held after the first lease.
func renewKeepsTheLease(t *testing.T, s idempotency.Store, prefix string, sleep func(time.Duration)) {
	ctx := context.Background()
	key := prefix + "renew"
	claim := idempotency.Record{Fingerprint: "fp", Token: "holder"}
	if found, err := s.Begin(ctx, key, claim, lease); err != nil || found != nil {
		t.Fatalf("Begin = %+v, %v; want the claim", found, err)
	}
	sleep(lease / 3)
	if err := s.Renew(ctx, key, claim, 10*lease); err != nil {
		t.Fatalf("Renew = %v", err)
	}
	sleep(lease + lease/2)
	found, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "other"}, lease)
	if err != nil || found == nil || found.Done {
		t.Fatalf("Begin after the first lease = %+v, %v; want the renewed claim in flight", found, err)
	}
	if err := s.Complete(ctx, key, claim, idempotency.Record{Fingerprint: "fp", Done: true, Status: 200}, time.Hour); err != nil {
		t.Errorf("Complete of the renewed claim = %v", err)
	}
}

// fullOfClaims fills a store of capacity n with claims in flight.
func fullOfClaims(t *testing.T, s idempotency.Store, prefix string, n int) {
	ctx := context.Background()
	claim := idempotency.Record{Fingerprint: "fp", Token: "holder"}
	done := idempotency.Record{Fingerprint: "fp", Done: true, Status: 201}
	if _, err := s.Begin(ctx, prefix+"record", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, prefix+"record", claim, done, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.Begin(ctx, fmt.Sprint(prefix, "claim-", i), claim, time.Minute); err != nil {
			t.Fatalf("claim %d of %d: %v (the completed record should have made room)", i+1, n, err)
		}
	}
	if _, err := s.Begin(ctx, prefix+"one-more", claim, time.Minute); !errors.Is(err, idempotency.ErrFull) {
		t.Fatalf("Begin on a store full of claims in flight = %v; want ErrFull", err)
	}
	for i := range n {
		found, err := s.Begin(ctx, fmt.Sprint(prefix, "claim-", i), idempotency.Record{Fingerprint: "fp", Token: "other"}, time.Minute)
		if err != nil || found == nil || found.Done {
			t.Fatalf("claim %d = %+v, %v; want it kept, in flight", i, found, err)
		}
	}
}

// honoursTheContext: a call with a context already done fails at once.
func honoursTheContext(t *testing.T, s idempotency.Store, prefix string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := s.Begin(ctx, prefix+"ctx", idempotency.Record{Fingerprint: "fp", Token: "t"}, time.Minute); err == nil {
		t.Errorf("Begin with a canceled context succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Begin with a canceled context took %v", d)
	}
}

func claimCompleteReplay(t *testing.T, s idempotency.Store, prefix string) {
	ctx := context.Background()
	key := prefix + "a"
	claim := idempotency.Record{Fingerprint: "fp", Token: "t1"}
	found, err := s.Begin(ctx, key, claim, time.Minute)
	if err != nil || found != nil {
		t.Fatalf("Begin on a free key = %+v, %v; want nil, nil (claimed)", found, err)
	}
	if found, err := s.Begin(ctx, key, claim, time.Minute); err != nil || found != nil {
		t.Fatalf("Begin again by the holder = %+v, %v; want nil, nil: a write sent again after its answer was lost finds its own claim", found, err)
	}

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute)
	if err != nil || found == nil {
		t.Fatalf("Begin on a claimed key = %+v, %v; want the claim", found, err)
	}
	if found.Done || found.Fingerprint != "fp" {
		t.Errorf("Begin on a claimed key found %+v; want the claim in flight with fingerprint fp", found)
	}

	const latin1 = "attachment; filename=\"caf\xe9.txt\"" // RFC 9110 allows bytes 0x80 to 0xFF: kept byte for byte
	done := idempotency.Record{Fingerprint: "fp", Done: true, Status: 201, Header: http.Header{"Location": {"/orders/1"}, "Content-Disposition": {latin1}}, Body: []byte(`{"id":1}`)}
	if err := s.Complete(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, done, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by another token = %v; want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, key, claim, done, time.Hour); err != nil {
		t.Fatalf("Complete by the holder = %v", err)
	}
	if err := s.Complete(ctx, key, claim, done, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("second Complete = %v; want ErrNotOwner: a claim completes once", err)
	}
	if err := s.Release(ctx, key, claim); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release after Complete = %v; want ErrNotOwner: a completed record is no claim to free", err)
	}

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t3"}, time.Minute)
	if err != nil || found == nil {
		t.Fatalf("Begin on a completed key = %+v, %v; want the record", found, err)
	}
	if !found.Done || found.Status != 201 || found.Header.Get("Location") != "/orders/1" || found.Header.Get("Content-Disposition") != latin1 || string(found.Body) != `{"id":1}` {
		t.Errorf("Begin on a completed key found %+v; want the stored response", found)
	}
}

func release(t *testing.T, s idempotency.Store, prefix string) {
	ctx := context.Background()
	key := prefix + "b"
	claim := idempotency.Record{Fingerprint: "fp", Token: "t1"}
	if found, err := s.Begin(ctx, key, claim, time.Minute); err != nil || found != nil {
		t.Fatalf("Begin on a free key = %+v, %v; want nil, nil", found, err)
	}
	if err := s.Release(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "other"}); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Release by another token = %v; want ErrNotOwner", err)
	}
	if err := s.Release(ctx, key, claim); err != nil {
		t.Fatalf("Release by the holder = %v", err)
	}
	if found, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute); err != nil || found != nil {
		t.Errorf("Begin on a released key = %+v, %v; want nil, nil: a released key is free", found, err)
	}
}

// concurrentRequestsRunOnce sends 200 concurrent POSTs with one key through
// the middleware: the handler must run once, and every response must be
// the original, its replay, or 409.
func concurrentRequestsRunOnce(t *testing.T, s idempotency.Store, prefix string) {
	var runs atomic.Int64
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(20 * time.Millisecond) // keep the first in flight while others arrive
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	})
	srv := httptest.NewServer(idempotency.Middleware(s, idempotency.SharedKeys(), idempotency.StoreTimeout(5*time.Second))(orders)) // correctness, not latency
	defer srv.Close()

	const clients = 200
	key := prefix + "c"
	var wg sync.WaitGroup
	var created, replayed, conflicts atomic.Int64
	for range clients {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
			req.Header.Set(idempotency.Header, key)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode == http.StatusConflict:
				conflicts.Add(1)
			case resp.StatusCode == http.StatusCreated && resp.Header.Get(idempotency.ReplayedHeader) == "true":
				replayed.Add(1)
				if string(body) != `{"order":1}` || resp.Header.Get("Location") != "/orders/1" {
					t.Errorf("replay = %s, Location %q; want the first response", body, resp.Header.Get("Location"))
				}
			case resp.StatusCode == http.StatusCreated:
				created.Add(1)
			default:
				t.Errorf("unexpected %d: %s", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want once", n)
	}
	if n := created.Load(); n != 1 {
		t.Errorf("%d original responses; want 1", n)
	}
	if n := created.Load() + replayed.Load() + conflicts.Load(); n != clients {
		t.Errorf("%d responses were the original, its replay or 409; want all %d", n, clients)
	}
}
