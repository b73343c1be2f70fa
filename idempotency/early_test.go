package idempotency_test

import (
	"context"
	"errors"
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

// saveOutage is a memory store whose saves (Complete) fail, or hang until
// their context ends, while down is set.
type saveOutage struct {
	idempotency.Store
	hang  bool
	down  atomic.Bool
	saves atomic.Int32 // saves that got through
}

func (s *saveOutage) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		if s.hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return errors.New("store down")
	}
	err := s.Store.Complete(ctx, key, claim, rec, ttl)
	if err == nil {
		s.saves.Add(1)
	}
	return err
}

// post sends a keyed POST and reads its answer to the end.
func postKeyed(t *testing.T, c *http.Client, url, key string) (*http.Response, string, time.Duration) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"sku":"a"}`))
	require.NoError(t, err)
	req.Header.Set(idempotency.Header, key)
	start := time.Now()
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp, string(b), time.Since(start)
}

// A store that fails or hangs as the handler ends holds the handler's
// answer for one StoreTimeout, not for as long as the save is retried (up
// to a lease): once a first try has failed, the answer goes out whole, its
// length declared, over HTTP/1.1 with "Connection: close", and the client
// reading it to its end has it while the save goes on. Once saved, a
// repeat gets the same answer replayed, and the handler ran once.
func TestTheAnswerGoesOutWhileASlowSaveIsRetried(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "store fails", true: "store hangs"}[hang], func(t *testing.T) {
			store := &saveOutage{Store: idempotency.NewMemoryStore(0), hang: hang}
			var runs atomic.Int32
			h := idempotency.Middleware(store, idempotency.SharedKeys(),
				idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(6*time.Second))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					store.down.Store(true) // as the handler ends
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, `{"order":1}`)
				}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			up := time.AfterFunc(2*time.Second, func() { store.down.Store(false) })
			defer up.Stop()

			resp, body, took := postKeyed(t, srv.Client(), srv.URL, "k")
			t.Logf("answered in %v", took)
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, `{"order":1}`, body)
			assert.EqualValues(t, len(body), resp.ContentLength)
			assert.True(t, resp.Close, "Connection: close: the connection is busy until the save ends")
			assert.Less(t, took, time.Second, "the answer waits for one try of the save, not for the store to come back at 2 s")
			assert.Zero(t, store.saves.Load(), "answered before the save got through")

			require.Eventually(t, func() bool { return store.saves.Load() == 1 }, 5*time.Second, 10*time.Millisecond, "saved once the store is back")
			resp, again, _ := postKeyed(t, srv.Client(), srv.URL, "k")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, "true", resp.Header.Get(idempotency.ReplayedHeader))
			assert.Equal(t, body, again)
			assert.EqualValues(t, 1, runs.Load())
		})
	}
}

// With the store answering, nothing changes: the answer goes out once
// saved, and the connection is kept.
func TestAnAnswerSavedAtOnceKeepsItsConnection(t *testing.T) {
	store := &saveOutage{Store: idempotency.NewMemoryStore(0)}
	h := idempotency.Middleware(store, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, body, _ := postKeyed(t, srv.Client(), srv.URL, "k")
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "done", body)
	assert.False(t, resp.Close)
	assert.EqualValues(t, 1, store.saves.Load())
}

// A graceful shutdown as the save is retried behind an answer already sent
// waits for the save: a retry on another replica replays the answer,
// where a save left to a goroutine of its own was lost at the shutdown
// and the handler ran again.
func TestShutdownWaitsForTheSaveBehindAnAnswerSent(t *testing.T) {
	store := &saveOutage{Store: idempotency.NewMemoryStore(0), hang: true}
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		store.down.Store(true)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order 1")
	})
	mw := func() http.Handler {
		return idempotency.Middleware(store, idempotency.SharedKeys(),
			idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(6*time.Second))(handler)
	}
	first := httptest.NewServer(mw())
	resp, body, took := postKeyed(t, first.Client(), first.URL, "k")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "order 1", body)
	require.Less(t, took, time.Second)

	var wg sync.WaitGroup
	var shutdown error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown = first.Config.Shutdown(ctx) // as on SIGTERM
	})
	time.Sleep(500 * time.Millisecond)
	store.down.Store(false)
	wg.Wait()
	require.NoError(t, shutdown)
	assert.EqualValues(t, 1, store.saves.Load(), "saved before the shutdown returned")

	other := httptest.NewServer(mw()) // another replica, the same store
	defer other.Close()
	resp, again, _ := postKeyed(t, other.Client(), other.URL, "k")
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "true", resp.Header.Get(idempotency.ReplayedHeader))
	assert.Equal(t, body, again)
	assert.EqualValues(t, 1, runs.Load(), "the handler ran once")
}

// What a held answer is sent as: the handler's headers as they were when
// it wrote its status (net/http ignores later changes), trailers set
// after, a body too long to hold streamed as the handler writes it, and a
// flushed one sent at the flush.
func TestAHeldAnswerIsWhatNetHTTPWouldSend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		check   func(t *testing.T, resp *http.Response, body string)
	}{
		{
			name: "headers set after the status are not sent",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Before", "1")
				w.WriteHeader(http.StatusAccepted)
				w.Header().Set("X-After", "1")
				_, _ = io.WriteString(w, "ok")
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, http.StatusAccepted, resp.StatusCode)
				assert.Equal(t, "1", resp.Header.Get("X-Before"))
				assert.Empty(t, resp.Header.Get("X-After"))
				assert.Equal(t, "ok", body)
			},
		},
		{
			name: "a trailer after a short body", // net/http declares its length, and sends no trailer
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, "body")
				w.Header().Set(http.TrailerPrefix+"X-Sum", "42")
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, "body", body)
				assert.EqualValues(t, 4, resp.ContentLength)
			},
		},
		{
			name: "a trailer after a long body", // chunked, with its trailer
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, strings.Repeat("x", 3000))
				w.Header().Set(http.TrailerPrefix+"X-Sum", "42")
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Len(t, body, 3000)
				assert.Equal(t, "42", resp.Trailer.Get("X-Sum"))
			},
		},
		{
			name: "headers sent once past what net/http buffers, before the handler returns",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, strings.Repeat("x", 8<<10))
				time.Sleep(300 * time.Millisecond) // the handler's tail
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, http.StatusCreated, resp.StatusCode)
			},
		},
		{
			name: "an Early Hints after the final status is dropped",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				w.WriteHeader(http.StatusEarlyHints)
				_, _ = io.WriteString(w, "ok")
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, "ok", body)
			},
		},
		{
			name: "a long body",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, strings.Repeat("x", 100<<10))
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Len(t, body, 100<<10)
			},
		},
		{
			name: "a flush sends what was written",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "first")
				http.NewResponseController(w).Flush()
				_, _ = io.WriteString(w, " second")
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, "first second", body)
				assert.EqualValues(t, -1, resp.ContentLength, "sent as it came, chunked")
			},
		},
		{
			name: "no body for a 204",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			},
			check: func(t *testing.T, resp *http.Response, body string) {
				assert.Equal(t, http.StatusNoContent, resp.StatusCode)
				assert.Empty(t, body)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := idempotency.Middleware(nil, idempotency.SharedKeys())(tc.handler)
			srv := httptest.NewServer(h)
			defer srv.Close()
			resp, body, _ := postKeyed(t, srv.Client(), srv.URL, "k")
			tc.check(t, resp, body)
			plain := httptest.NewServer(tc.handler) // the same handler without the middleware
			defer plain.Close()
			presp, pbody, _ := postKeyed(t, plain.Client(), plain.URL, "k")
			assert.Equal(t, presp.StatusCode, resp.StatusCode)
			assert.Equal(t, pbody, body)
			assert.Equal(t, presp.ContentLength, resp.ContentLength)
			assert.Equal(t, presp.Trailer, resp.Trailer)
			assert.Equal(t, presp.TransferEncoding, resp.TransferEncoding)
		})
	}
}
