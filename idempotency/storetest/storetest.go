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
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	prefix := fmt.Sprintf("storetest-%d-", time.Now().UnixNano())
	t.Run("ClaimCompleteReplay", func(t *testing.T) { claimCompleteReplay(t, newStore(t), prefix) })
	t.Run("Release", func(t *testing.T) { release(t, newStore(t), prefix) })
	t.Run("ConcurrentRequestsRunOnce", func(t *testing.T) { concurrentRequestsRunOnce(t, newStore(t), prefix) })
}

func claimCompleteReplay(t *testing.T, s idempotency.Store, prefix string) {
	ctx := context.Background()
	key := prefix + "a"
	claim := idempotency.Record{Fingerprint: "fp", Token: "t1"}
	found, err := s.Begin(ctx, key, claim, time.Minute)
	if err != nil || found != nil {
		t.Fatalf("Begin on a free key = %+v, %v; want nil, nil (claimed)", found, err)
	}

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute)
	if err != nil || found == nil {
		t.Fatalf("Begin on a claimed key = %+v, %v; want the claim", found, err)
	}
	if found.Done || found.Fingerprint != "fp" {
		t.Errorf("Begin on a claimed key found %+v; want the claim in flight with fingerprint fp", found)
	}

	done := idempotency.Record{Fingerprint: "fp", Done: true, Status: 201, Header: http.Header{"Location": {"/orders/1"}}, Body: []byte(`{"id":1}`)}
	if err := s.Complete(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, done, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("Complete by another token = %v; want ErrNotOwner", err)
	}
	if err := s.Complete(ctx, key, claim, done, time.Hour); err != nil {
		t.Fatalf("Complete by the holder = %v", err)
	}
	if err := s.Complete(ctx, key, claim, done, time.Hour); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("second Complete = %v; want ErrNotOwner: a claim completes once", err)
	}

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t3"}, time.Minute)
	if err != nil || found == nil {
		t.Fatalf("Begin on a completed key = %+v, %v; want the record", found, err)
	}
	if !found.Done || found.Status != 201 || found.Header.Get("Location") != "/orders/1" || string(found.Body) != `{"id":1}` {
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
	srv := httptest.NewServer(idempotency.Middleware(s)(orders))
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
