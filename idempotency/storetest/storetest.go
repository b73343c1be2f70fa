// Package storetest checks that an [idempotency.Store] keeps the contract
// the middleware relies on, as testing/fstest does for file systems. Use it
// from a test of your own store.
package storetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// Run runs the contract's tests against stores made by newStore. Keys are
// unique to the run, so a shared server needs no cleaning.
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
	require.NoError(t, err)
	require.Nil(t, found, "a free key is claimed")

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, found)
	assert.False(t, found.Done, "the claim is in flight")
	assert.Equal(t, "fp", found.Fingerprint)

	done := idempotency.Record{Fingerprint: "fp", Done: true, Status: 201, Header: http.Header{"Location": {"/orders/1"}}, Body: []byte(`{"id":1}`)}
	require.ErrorIs(t, s.Complete(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, done, time.Hour), idempotency.ErrNotOwner)
	require.NoError(t, s.Complete(ctx, key, claim, done, time.Hour))
	require.ErrorIs(t, s.Complete(ctx, key, claim, done, time.Hour), idempotency.ErrNotOwner, "a claim completes once")

	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t3"}, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, found)
	assert.True(t, found.Done)
	assert.Equal(t, 201, found.Status)
	assert.Equal(t, "/orders/1", found.Header.Get("Location"))
	assert.JSONEq(t, `{"id":1}`, string(found.Body))
}

func release(t *testing.T, s idempotency.Store, prefix string) {
	ctx := context.Background()
	key := prefix + "b"
	claim := idempotency.Record{Fingerprint: "fp", Token: "t1"}
	found, err := s.Begin(ctx, key, claim, time.Minute)
	require.NoError(t, err)
	require.Nil(t, found)
	require.ErrorIs(t, s.Release(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "other"}), idempotency.ErrNotOwner)
	require.NoError(t, s.Release(ctx, key, claim))
	found, err = s.Begin(ctx, key, idempotency.Record{Fingerprint: "fp", Token: "t2"}, time.Minute)
	require.NoError(t, err)
	assert.Nil(t, found, "a released key is free")
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
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode == http.StatusConflict:
				conflicts.Add(1)
			case resp.StatusCode == http.StatusCreated && resp.Header.Get(idempotency.ReplayedHeader) == "true":
				replayed.Add(1)
				assert.JSONEq(t, `{"order":1}`, string(body))
				assert.Equal(t, "/orders/1", resp.Header.Get("Location"))
			case resp.StatusCode == http.StatusCreated:
				created.Add(1)
			default:
				t.Errorf("unexpected %d: %s", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, runs.Load(), "the handler ran once")
	assert.EqualValues(t, 1, created.Load())
	assert.EqualValues(t, clients, created.Load()+replayed.Load()+conflicts.Load())
}
