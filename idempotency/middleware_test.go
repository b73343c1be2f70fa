package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// server is a handler behind the middleware that counts its runs.
type server struct {
	runs    atomic.Int64
	handler http.Handler
}

func newServer(store idempotency.Store, opts ...idempotency.Option) *server {
	s := &server{}
	s.handler = idempotency.Middleware(store, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		if r.URL.Path == "/panic" {
			panic("handler bug")
		}
		if r.URL.Path == "/big" {
			_, _ = w.Write(make([]byte, 2048))
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	return s
}

func (s *server) do(method, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set(idempotency.Header, key)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

func TestReplayAndConflicts(t *testing.T) {
	s := newServer(idempotency.NewMemoryStore(0))
	first := s.do(http.MethodPost, "/orders", "k1", `{"sku":"a"}`)
	require.Equal(t, http.StatusCreated, first.Code)
	assert.Empty(t, first.Header().Get(idempotency.ReplayedHeader))

	again := s.do(http.MethodPost, "/orders", "k1", `{"sku":"a"}`)
	assert.Equal(t, http.StatusCreated, again.Code)
	assert.Equal(t, "true", again.Header().Get(idempotency.ReplayedHeader))
	assert.Equal(t, "/orders/1", again.Header().Get("Location"))
	assert.JSONEq(t, `{"order":1}`, again.Body.String())
	assert.EqualValues(t, 1, s.runs.Load(), "a replay does not run the handler")

	tests := []struct {
		name         string
		method, path string
		key, body    string
		want         int
	}{
		{"other body", http.MethodPost, "/orders", "k1", `{"sku":"b"}`, http.StatusUnprocessableEntity},
		{"other path", http.MethodPost, "/refunds", "k1", `{"sku":"a"}`, http.StatusUnprocessableEntity},
		{"other method", http.MethodPatch, "/orders", "k1", `{"sku":"a"}`, http.StatusUnprocessableEntity},
		{"invalid key", http.MethodPost, "/orders", "a key", `{}`, http.StatusBadRequest},
		{"GET is not covered", http.MethodGet, "/orders", "k1", ``, http.StatusCreated},
		{"no key passes through", http.MethodPost, "/orders", "", `{}`, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := s.do(tt.method, tt.path, tt.key, tt.body)
			assert.Equal(t, tt.want, w.Code, w.Body.String())
			if tt.want >= 400 {
				assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			}
		})
	}
}

func TestNilStoreIsInMemory(t *testing.T) {
	s := newServer(nil)
	s.do(http.MethodPost, "/orders", "k", "{}")
	assert.Equal(t, "true", s.do(http.MethodPost, "/orders", "k", "{}").Header().Get(idempotency.ReplayedHeader))
	assert.EqualValues(t, 1, s.runs.Load())
}

func TestRequiredKey(t *testing.T) {
	s := newServer(idempotency.NewMemoryStore(0), idempotency.Required())
	w := s.do(http.MethodPost, "/orders", "", `{}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "missing idempotency key")
	assert.Zero(t, s.runs.Load())
	assert.Equal(t, http.StatusCreated, s.do(http.MethodGet, "/orders", "", "").Code, "GET needs no key")
}

func TestInFlightGets409(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var runs atomic.Int64
		h := idempotency.Middleware(idempotency.NewMemoryStore(0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-release
			w.WriteHeader(http.StatusAccepted)
		}))
		post := func() *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader("x"))
			r.Header.Set(idempotency.Header, `"job-7"`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		go post()
		synctest.Wait()
		w := post()
		assert.Equal(t, http.StatusConflict, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		close(release)
		synctest.Wait()
		assert.Equal(t, http.StatusAccepted, post().Code)
		assert.EqualValues(t, 1, runs.Load())
	})
}

func TestRecordsExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(idempotency.NewMemoryStore(0), idempotency.TTL(time.Hour))
		s.do(http.MethodPost, "/orders", "k", "{}")
		time.Sleep(time.Hour - time.Second)
		assert.Equal(t, "true", s.do(http.MethodPost, "/orders", "k", "{}").Header().Get(idempotency.ReplayedHeader))
		time.Sleep(time.Second)
		w := s.do(http.MethodPost, "/orders", "k", "{}")
		assert.Empty(t, w.Header().Get(idempotency.ReplayedHeader), "an expired key runs again")
		assert.EqualValues(t, 2, s.runs.Load())
	})
}

func TestPanicReleasesTheKey(t *testing.T) {
	s := newServer(idempotency.NewMemoryStore(0))
	assert.Panics(t, func() { s.do(http.MethodPost, "/panic", "k", "{}") })
	assert.Panics(t, func() { s.do(http.MethodPost, "/panic", "k", "{}") }, "the key was released, so the handler runs again")
	assert.EqualValues(t, 2, s.runs.Load())
}

func TestTooLarge(t *testing.T) {
	s := newServer(idempotency.NewMemoryStore(0), idempotency.MaxBody(10), idempotency.MaxResponse(1024))
	assert.Equal(t, http.StatusRequestEntityTooLarge, s.do(http.MethodPost, "/orders", "k", strings.Repeat("x", 11)).Code)
	assert.Zero(t, s.runs.Load())

	first := s.do(http.MethodPost, "/big", "k2", "{}")
	assert.Equal(t, 2048, first.Body.Len(), "a large response is still sent whole")
	assert.Equal(t, http.StatusInternalServerError, s.do(http.MethodPost, "/big", "k2", "{}").Code)
	assert.EqualValues(t, 1, s.runs.Load(), "and never run twice")
}

func TestScopeSeparatesClients(t *testing.T) {
	s := newServer(idempotency.NewMemoryStore(0), idempotency.Scope(func(r *http.Request) string { return r.Header.Get("Account") }))
	for _, account := range []string{"alice", "bob"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "same")
		r.Header.Set("Account", account)
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, r)
		assert.Empty(t, w.Header().Get(idempotency.ReplayedHeader))
	}
	assert.EqualValues(t, 2, s.runs.Load())
}

type failingStore struct{ idempotency.Store }

func (failingStore) Begin(context.Context, string, idempotency.Record, time.Duration) (*idempotency.Record, error) {
	return nil, errors.New("connection refused")
}

func TestStoreFailureFailsClosed(t *testing.T) {
	s := newServer(failingStore{})
	assert.Equal(t, http.StatusServiceUnavailable, s.do(http.MethodPost, "/orders", "k", "{}").Code)
	assert.Zero(t, s.runs.Load())
}

// TestFullMemoryStoreAnswers503AndNeverRunsTwice: at capacity with
// requests in flight, a new key gets 503 with Retry-After, and a repeat of
// an in-flight key gets 409, never a second run.
func TestFullMemoryStoreAnswers503AndNeverRunsTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var runs sync.Map
		h := idempotency.Middleware(idempotency.NewMemoryStore(5))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := runs.LoadOrStore(r.Header.Get(idempotency.Header), new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
		post := func(key string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		for i := range 5 {
			go post(fmt.Sprint("k", i))
		}
		synctest.Wait()
		full := post("k-new")
		assert.Equal(t, http.StatusServiceUnavailable, full.Code)
		assert.Equal(t, "1", full.Header().Get("Retry-After"))
		for i := range 5 {
			assert.Equal(t, http.StatusConflict, post(fmt.Sprint("k", i)).Code)
		}
		close(release)
		synctest.Wait()
		runs.Range(func(k, n any) bool {
			assert.EqualValues(t, 1, n.(*atomic.Int64).Load(), "%v ran once", k)
			return true
		})
	})
}

// TestClientGoneWithNothingCommittedFreesTheKey: a context-aware handler
// whose client dropped answers 5xx; the key is freed, and the retry runs
// once.
func TestClientGoneWithNothingCommittedFreesTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel) // the client drops
		assert.Equal(t, http.StatusInternalServerError, s.post(ctx, "k", "").Code)
		w := s.post(t.Context(), "k", "")
		assert.Equal(t, http.StatusCreated, w.Code)
		assert.Empty(t, w.Header().Get(idempotency.ReplayedHeader), "the retry ran")
		s.post(t.Context(), "k", "")
		assert.EqualValues(t, 2, s.runs.Load())
	})
}

// TestKeysAreScopedPerCaller: the same key from two Authorization values
// runs twice, and neither caller gets the other's response.
func TestKeysAreScopedPerCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Millisecond)
		alice := s.post(t.Context(), "same", "Bearer alice")
		bob := s.post(t.Context(), "same", "Bearer bob")
		assert.JSONEq(t, `{"order":1}`, alice.Body.String())
		assert.JSONEq(t, `{"order":2}`, bob.Body.String())
		assert.JSONEq(t, `{"order":1}`, s.post(t.Context(), "same", "Bearer alice").Body.String())
		assert.JSONEq(t, `{"order":2}`, s.post(t.Context(), "same", "Bearer bob").Body.String())
		assert.EqualValues(t, 2, s.runs.Load())

		shared := newSlowServer(idempotency.NewMemoryStore(0), time.Millisecond, idempotency.SharedKeys())
		shared.post(t.Context(), "same", "Bearer alice")
		assert.Equal(t, "true", shared.post(t.Context(), "same", "Bearer bob").Header().Get(idempotency.ReplayedHeader), "one namespace, by choice")
	})
}

// TestReplayKeepsThisRequestsHeaders: the replay carries the stored
// end-to-end headers, never hop-by-hop ones, Date or Set-Cookie, and the
// headers that outer middleware set on this request win.
func TestReplayKeepsThisRequestsHeaders(t *testing.T) {
	n := 0
	inner := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		h := w.Header()
		h.Set("Location", "/orders/1")
		h.Set("Set-Cookie", "session=secret")
		h.Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
		h.Set("Connection", "close")
		h.Set("Keep-Alive", "timeout=5")
		w.WriteHeader(http.StatusCreated)
	}))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		inner.ServeHTTP(w, r)
	})
	post := func(id, origin string) http.Header {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		r.Header.Set("X-Request-Id", id)
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		outer.ServeHTTP(w, r)
		return w.Header()
	}
	post("req-1", "https://a.example")
	h := post("req-2", "https://b.example")
	assert.Equal(t, 1, n)
	assert.Equal(t, "true", h.Get(idempotency.ReplayedHeader))
	assert.Equal(t, "/orders/1", h.Get("Location"))
	assert.Equal(t, "req-2", h.Get("X-Request-Id"), "this request's id, not the stored one")
	assert.Equal(t, "https://b.example", h.Get("Access-Control-Allow-Origin"))
	for _, never := range []string{"Set-Cookie", "Date", "Connection", "Keep-Alive"} {
		assert.Empty(t, h.Get(never), never)
	}
}

func TestAbandonedClaimFreesTheKey(t *testing.T) {
	n := 0
	h := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		c := idempotency.FromContext(r.Context())
		require.NotNil(t, c)
		if n == 1 {
			c.Abandon() // say, its transaction failed
			http.Error(w, "commit failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Equal(t, 2, n, "abandoned once, then run and stored")
}

func TestRetryableStatusesFreeTheKey(t *testing.T) {
	var runs atomic.Int64
	h := idempotency.Middleware(idempotency.NewMemoryStore(0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() int {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusServiceUnavailable, post())
	assert.Equal(t, http.StatusCreated, post(), "a 503 is not stored: the retry runs")
	assert.Equal(t, http.StatusCreated, post(), "the 201 is")
	assert.EqualValues(t, 2, runs.Load())
}

func TestLeaseUnderThreeStoreTimeoutsPanics(t *testing.T) {
	assert.Panics(t, func() {
		idempotency.Middleware(nil, idempotency.Lease(time.Second), idempotency.StoreTimeout(time.Second))
	})
	assert.Panics(t, func() { idempotency.Middleware(nil, idempotency.Lease(2*time.Nanosecond)) })
}

// TestClientGoneBeforeAnyWriteFreesTheKey: a handler that returns without
// writing after its client left stores nothing.
func TestClientGoneBeforeAnyWriteFreesTheKey(t *testing.T) {
	runs := 0
	h := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		<-r.Context().Done() // gives up without a word
	}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	r = httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Equal(t, 2, runs, "no empty 200 was stored: the retry ran")
}

// TestHandlerCompletedClaimIsKeptWhenTheClientLeaves: a handler that
// stores its result itself and says so (Claim.Completed) has its key kept
// even though its client left and it wrote nothing: the middleware frees
// no key that the handler said it completed, so a retry does not run the
// effect again. Here the handler's own Complete failed, since it ran under
// the canceled context, and the claim is held until its lease runs out;
// with a Complete that got through, the retry is its replay.
func TestHandlerCompletedClaimIsKeptWhenTheClientLeaves(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detach bool // the handler stores under a context that its client's leaving does not cancel
		want   int
	}{
		{name: "its Complete failed", want: http.StatusConflict},
		{name: "its Complete got through", detach: true, want: http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := idempotency.NewMemoryStore(0)
			effects := 0
			h := idempotency.Middleware(st)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c := idempotency.FromContext(r.Context())
				effects++
				ctx := r.Context()
				if tc.detach {
					ctx = context.WithoutCancel(ctx)
				}
				_ = st.Complete(ctx, c.Key, c.Record, idempotency.Record{Fingerprint: c.Record.Fingerprint, Done: true, Status: http.StatusCreated}, c.TTL)
				c.Completed()
			}))
			gone, cancel := context.WithCancel(t.Context())
			cancel()
			r := httptest.NewRequestWithContext(gone, http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "o-1")
			h.ServeHTTP(httptest.NewRecorder(), r)

			r = httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "o-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, 1, effects, "the effect ran once")
			assert.Equal(t, tc.want, w.Code)
		})
	}
}
