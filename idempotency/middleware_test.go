package idempotency_test

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
	s.handler = idempotency.Middleware(store, append([]idempotency.Option{idempotency.SharedKeys()}, opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		// Room for 5 claims: a scoped key of 35 bytes, a fingerprint of 64, a token of 26.
		h := idempotency.Middleware(idempotency.NewMemoryStore(5*(idempotency.MemoryEntryOverhead+35+64+26)), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
// whose client dropped says that it committed nothing by answering 503
// (one of ReleaseStatus); the key is freed, and the retry runs once.
func TestClientGoneWithNothingCommittedFreesTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel) // the client drops
		assert.Equal(t, http.StatusServiceUnavailable, s.post(ctx, "k", "").Code)
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
		byToken := idempotency.Scope(func(r *http.Request) string { return r.Header.Get("Authorization") })
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Millisecond, byToken)
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
	inner := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.Lease(time.Second), idempotency.StoreTimeout(time.Second))
	})
	assert.Panics(t, func() { idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.Lease(2*time.Nanosecond)) })
}

// TestCommittedThenContextEndedRunsOnce: a handler that commits, then
// sees its client leave and returns without writing, is not run again: no
// empty 200 is stored either, and the retry gets 500 "response
// incomplete". One commit.
func TestCommittedThenContextEndedRunsOnce(t *testing.T) {
	commits := 0
	ctx, cancel := context.WithCancel(t.Context())
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		commits++            // the effect commits
		cancel()             // then the client leaves
		<-r.Context().Done() // and the handler gives up without a word
	}))
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	r = httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, 1, commits, "one commit")
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Contains(t, w.Body.String(), "response incomplete")
}

// TestPanicAfter201StoresA500: a handler that panics after it wrote 201
// (its effect may stand) has a 500 stored, and the retry gets it: one
// commit. The 201, held until the handler returns, is not sent (net/http
// would not have sent it either: it had not left its buffer). One that
// panics before writing anything frees the key.
func TestPanicAfter201StoresA500(t *testing.T) {
	commits := 0
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		commits++
		if r.URL.Path == "/early" {
			panic("before any write")
		}
		w.WriteHeader(http.StatusCreated)
		panic("after the 201")
	}))
	serve := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, path)
		w := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }() // as net/http does
			h.ServeHTTP(w, r)
		}()
		return w
	}
	first := serve("/late")
	assert.Empty(t, first.Body.String())
	assert.False(t, first.Flushed)
	w := serve("/late")
	assert.Equal(t, 1, commits, "one commit")
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))

	serve("/early")
	serve("/early")
	assert.Equal(t, 3, commits, "nothing was written before the panic: the key was freed")
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
			gone, cancel := context.WithCancel(t.Context())
			h := idempotency.Middleware(st, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c := idempotency.FromContext(r.Context())
				effects++
				cancel() // the client leaves as it runs
				ctx := r.Context()
				if tc.detach {
					ctx = context.WithoutCancel(ctx)
				}
				_ = st.Complete(ctx, c.Key, c.Record, idempotency.Record{Fingerprint: c.Record.Fingerprint, Done: true, Status: http.StatusCreated}, c.TTL)
				c.Completed()
			}))
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

// TestStreamCutShortIsNotReplayedAsComplete: a streamed 200 whose client
// leaves after 3 of 10 parts is stored as incomplete: the retry gets 500
// "response incomplete", not 3 parts as a complete 200, and the handler
// does not run again.
func TestStreamCutShortIsNotReplayedAsComplete(t *testing.T) {
	var runs atomic.Int64
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for i := range 10 {
			if _, err := fmt.Fprintf(w, "part %d\n", i); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, "stream")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	buf := make([]byte, len("part 0\n")*3)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	cancel() // the client leaves after 3 parts
	resp.Body.Close()

	var code int
	var body string
	require.Eventually(t, func() bool { // once the first request has ended
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "stream")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return code != http.StatusConflict
	}, 2*time.Second, 20*time.Millisecond)
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "response incomplete")
	assert.EqualValues(t, 1, runs.Load())
}

// TestCookieCallersAreScopedBySession: Alice and Bob, authenticated by a
// session cookie, send the same key and body: scoped by the session's
// user, Bob's request runs as his own and never gets Alice's body; Alice's
// own retry after her session was renewed (a new cookie, the same user)
// is replayed, not run again.
func TestCookieCallersAreScopedBySession(t *testing.T) {
	sessions := map[string]string{"s-alice-1": "alice", "s-alice-2": "alice", "s-bob": "bob"} // the service's session table
	bySession := idempotency.Scope(func(r *http.Request) string {
		c, err := r.Cookie("session")
		if err != nil {
			return "" // unauthenticated: an outer middleware refused it already
		}
		return "user:" + sessions[c.Value]
	})
	runs := 0
	h := idempotency.Middleware(nil, bySession)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		c, _ := r.Cookie("session")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d,"for":%q}`, runs, sessions[c.Value])
	}))
	post := func(cookie string) string {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"a"}`))
		r.Header.Set(idempotency.Header, "same")
		r.AddCookie(&http.Cookie{Name: "session", Value: cookie})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Body.String()
	}
	assert.JSONEq(t, `{"order":1,"for":"alice"}`, post("s-alice-1"))
	assert.JSONEq(t, `{"order":2,"for":"bob"}`, post("s-bob"), "Bob's request runs as his own")
	assert.JSONEq(t, `{"order":1,"for":"alice"}`, post("s-alice-2"), "Alice's retry with a renewed session is replayed")
	assert.Equal(t, 2, runs)
	assert.PanicsWithValue(t, "idempotency: Middleware: give Scope (keys per caller, by identity) or SharedKeys (one namespace): no default, so that callers are neither silently shared nor split",
		func() { idempotency.Middleware(nil) }, "no scope guessed")
}

// TestAnEmptyScopeIsRefused: a Scope that finds no identity refuses the
// keyed request with 401 rather than put it in a namespace shared with
// every other caller without one; the handler does not run.
func TestAnEmptyScopeIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bySession := idempotency.Scope(func(r *http.Request) string { return r.Header.Get("Authorization") })
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Millisecond, bySession)
		for range 2 {
			w := s.post(t.Context(), "same", "")
			assert.Equal(t, http.StatusUnauthorized, w.Code)
			assert.Contains(t, w.Body.String(), "no caller identity")
		}
		assert.EqualValues(t, 0, s.runs.Load(), "never run in a shared namespace")
		assert.Equal(t, http.StatusCreated, s.post(t.Context(), "same", "Bearer alice").Code)
		assert.EqualValues(t, 1, s.runs.Load())
	})
}

// TestUnflushedStreamCutShortIsNotReplayedAsComplete: a handler that never
// calls Flush still sends its body as net/http's buffer fills; its client
// leaving mid-body makes the record incomplete, as does a body shorter
// than its declared Content-Length.
func TestUnflushedStreamCutShortIsNotReplayedAsComplete(t *testing.T) {
	t.Run("client gone", func(t *testing.T) {
		var runs atomic.Int64
		ctx, cancel := context.WithCancel(t.Context())
		h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) > 1 {
				return
			}
			for i := range 10 {
				_, _ = fmt.Fprintf(w, "part %d\n", i)
				if i == 2 {
					cancel() // the client leaves after 3 parts, none flushed by the handler
					<-r.Context().Done()
					return
				}
			}
		}))
		post := func(ctx context.Context) *httptest.ResponseRecorder {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		post(ctx)
		w := post(t.Context())
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.Contains(t, w.Body.String(), "response incomplete")
		assert.EqualValues(t, 1, runs.Load())
	})
	t.Run("shorter than its Content-Length", func(t *testing.T) {
		var runs atomic.Int64
		h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "only ten b")
		}))
		for range 2 {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "k")
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.Contains(t, w.Body.String(), "response incomplete")
		assert.EqualValues(t, 1, runs.Load())
	})
}

// TestContextEndedAsTheKeyWasClaimedRunsNothing: a request whose context
// ended as its key was claimed (its deadline spent on a slow store, or
// its client gone) is not run, and its key is freed: a retry runs it.
func TestContextEndedAsTheKeyWasClaimedRunsNothing(t *testing.T) {
	runs := 0
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	for _, cause := range []string{"deadline", "client-gone"} {
		runs = 0
		ctx, cancel := context.WithCancel(t.Context())
		if cause == "deadline" {
			ctx, cancel = context.WithTimeout(t.Context(), -time.Second)
		}
		cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, cause)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, cause)
		assert.Zero(t, runs, cause)
		r = httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, cause)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusCreated, w.Code, cause)
		assert.Equal(t, 1, runs, cause)
	}
}
