package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(0) })
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(50) }, storetest.Capacity(50))
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e-40d5"`, "8e03978e-40d5", true},
		{`"a b"`, "a b", true},
		{`"say \"hi\" \\o/"`, `say "hi" \o/`, true},
		{"  key-1 ", "key-1", true},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), "", false},
		{"", "", false},
		{`""`, "", false},
		{`"open`, "", false},
		{`"a"b"`, "", false},
		{`"bad \n escape"`, "", false},
		{`"bad \x"`, "", false},
		{"a b", "", false},
		{"tab\there", "", false},
		{"ключ", "", false},
		{"nul\x00", "", false},
	}
	for _, tt := range tests {
		got, err := idempotency.ParseKey(tt.in)
		if tt.ok {
			assert.NoError(t, err, "%q", tt.in)
		} else {
			assert.ErrorIs(t, err, idempotency.ErrInvalidKey, "%q", tt.in)
		}
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"\\"`, "", `"`, " x ", "\x7f", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := idempotency.ParseKey(s)
		if err != nil {
			assert.Empty(t, k)
			return
		}
		assert.NotEmpty(t, k)
		assert.LessOrEqual(t, len(k), idempotency.MaxKeyLen)
		for i := 0; i < len(k); i++ {
			assert.True(t, k[i] >= ' ' && k[i] <= '~', "printable ASCII only")
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		back, err := idempotency.ParseKey(quoted)
		assert.NoError(t, err, "every key can be sent quoted")
		assert.Equal(t, k, back)
	})
}

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

func TestMemoryStoreNeverEvictsAClaimInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(3)
		ctx := t.Context()
		claim := idempotency.Record{Token: "t"}
		done := idempotency.Record{Done: true, Status: 201}
		for _, k := range []string{"a", "b"} {
			found, err := store.Begin(ctx, k, claim, time.Minute)
			require.NoError(t, err)
			require.Nil(t, found)
			require.NoError(t, store.Complete(ctx, k, claim, done, time.Hour))
		}
		_, err := store.Begin(ctx, "c", claim, time.Minute) // in flight
		require.NoError(t, err)
		for _, k := range []string{"d", "e"} { // evict the records, oldest first
			_, err := store.Begin(ctx, k, claim, time.Minute)
			require.NoError(t, err)
		}
		found, err := store.Begin(ctx, "a", claim, time.Minute)
		require.ErrorIs(t, err, idempotency.ErrFull, "full of requests in flight")
		assert.Nil(t, found)
		found, err = store.Begin(ctx, "c", claim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "the claim in flight was kept")
		assert.False(t, found.Done)

		time.Sleep(time.Minute) // the leases run out
		found, err = store.Begin(ctx, "new", claim, time.Minute)
		require.NoError(t, err)
		assert.Nil(t, found, "an expired claim makes room")
	})
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

// slowServer runs a handler that takes d, honouring its context, behind
// the middleware, and counts its runs.
type slowServer struct {
	runs, canceled atomic.Int64
	handler        http.Handler
	events         *events
}

type events struct {
	mu    sync.Mutex
	kinds []string
}

func (e *events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, ev.Kind.String())
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.kinds)
}

func newSlowServer(store idempotency.Store, d time.Duration, opts ...idempotency.Option) *slowServer {
	s := &slowServer{events: &events{}}
	opts = append(opts, idempotency.WithListener(s.events), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	s.handler = idempotency.Middleware(store, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			s.canceled.Add(1)
			http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	return s
}

func (s *slowServer) post(ctx context.Context, key, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, key)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

// TestHandlerSlowerThanTheLeaseRunsOnce: the lease is renewed while the
// handler runs, so repeats get 409 and then the replay.
func TestHandlerSlowerThanTheLeaseRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(idempotency.NewMemoryStore(0), time.Second, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))
		go s.post(t.Context(), "k", "")
		time.Sleep(500 * time.Millisecond)
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code, "still held after the lease")
		time.Sleep(time.Second)
		w := s.post(t.Context(), "k", "")
		assert.Equal(t, http.StatusCreated, w.Code)
		assert.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		for range 3 {
			s.post(t.Context(), "k", "")
		}
		assert.EqualValues(t, 1, s.runs.Load())
		assert.Empty(t, s.events.list())
	})
}

// flakyStore fails the calls its switches say, after delegating nothing.
type flakyStore struct {
	idempotency.Store
	failComplete, failRelease, failRenew atomic.Bool
	stealOnRenew                         atomic.Bool
}

var errStoreDown = errors.New("store down")

func (f *flakyStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if f.failComplete.Load() {
		return errStoreDown
	}
	return f.Store.Complete(ctx, key, claim, rec, ttl)
}

func (f *flakyStore) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if f.failRelease.Load() {
		return errStoreDown
	}
	return f.Store.Release(ctx, key, claim)
}

func (f *flakyStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if f.stealOnRenew.Load() {
		return idempotency.ErrNotOwner
	}
	if f.failRenew.Load() {
		return errStoreDown
	}
	return f.Store.Renew(ctx, key, claim, lease)
}

// TestUnsavedResultIsReportedAndKeepsTheKeyForALease: a result that cannot
// be stored is reported; repeats get 409 until the lease runs out.
func TestUnsavedResultIsReportedAndKeepsTheKeyForALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.failComplete.Store(true)
		s := newSlowServer(store, 10*time.Millisecond, idempotency.Lease(30*time.Second))
		assert.Equal(t, http.StatusCreated, s.post(t.Context(), "k", "").Code)
		assert.Contains(t, s.events.list(), "not_stored")
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code, "no second run while the first's effect may stand")
		time.Sleep(30 * time.Second)
		store.failComplete.Store(false)
		assert.Equal(t, http.StatusCreated, s.post(t.Context(), "k", "").Code)
		assert.EqualValues(t, 2, s.runs.Load(), "one lease later, the key is free again")
	})
}

// TestPanicWhileTheStoreIsDownFreesTheKeyAfterOneLease: the release fails
// and is reported; the key is runnable again one lease later, not minutes.
func TestPanicWhileTheStoreIsDownFreesTheKeyAfterOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.failRelease.Store(true)
		ev := &events{}
		h := idempotency.Middleware(store, idempotency.WithListener(ev), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }))
		post := func() (code int) {
			defer func() { _ = recover() }()
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		post()
		assert.Contains(t, ev.list(), "store_failed")
		assert.Equal(t, http.StatusConflict, post())
		time.Sleep(30 * time.Second)
		assert.Zero(t, post(), "the handler ran (and panicked) again")
	})
}

// TestLostLeaseCancelsTheHandlerAndIsReported.
func TestLostLeaseCancelsTheHandlerAndIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: idempotency.NewMemoryStore(0)}
		store.stealOnRenew.Store(true)
		s := newSlowServer(store, time.Minute, idempotency.Lease(3*time.Second))
		w := s.post(t.Context(), "k", "")
		assert.EqualValues(t, 1, s.canceled.Load(), "the handler's context was canceled")
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.Contains(t, s.events.list(), "lease_lost")

		store.stealOnRenew.Store(false)
		store.failRenew.Store(true) // the store cannot renew until the lease runs out
		s2 := newSlowServer(store, time.Minute, idempotency.Lease(3*time.Second))
		s2.post(t.Context(), "k2", "")
		assert.Contains(t, s2.events.list(), "store_failed")
		assert.Contains(t, s2.events.list(), "lease_lost")
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

// slowOnceStore's first Renew takes longer than the store timeout.
type slowOnceStore struct {
	idempotency.Store
	slowed atomic.Bool
}

func (s *slowOnceStore) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.slowed.CompareAndSwap(false, true) {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Renew(ctx, key, claim, lease)
}

// TestASlowRenewalIsTriedAgainInTime: one renewal that times out is tried
// again before the lease runs out; the key stays held, one run.
func TestASlowRenewalIsTriedAgainInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowOnceStore{Store: idempotency.NewMemoryStore(0)}
		s := newSlowServer(store, 900*time.Millisecond, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))
		go s.post(t.Context(), "k", "")
		time.Sleep(400 * time.Millisecond)
		assert.Equal(t, http.StatusConflict, s.post(t.Context(), "k", "").Code)
		time.Sleep(time.Second)
		assert.EqualValues(t, 1, s.runs.Load())
		assert.NotContains(t, s.events.list(), "lease_lost")
	})
}

func TestLeaseUnderThreeStoreTimeoutsPanics(t *testing.T) {
	assert.Panics(t, func() {
		idempotency.Middleware(nil, idempotency.Lease(time.Second), idempotency.StoreTimeout(time.Second))
	})
	assert.Panics(t, func() { idempotency.Middleware(nil, idempotency.Lease(2*time.Nanosecond)) })
}

// TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord.
func TestMemoryStoreDropsAnExpiredClaimBeforeALiveRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(2)
		ctx := t.Context()
		claim := idempotency.Record{Fingerprint: "fp", Token: "t"}
		_, _ = store.Begin(ctx, "a", claim, time.Minute)
		require.NoError(t, store.Complete(ctx, "a", claim, idempotency.Record{Fingerprint: "fp", Done: true, Status: 201}, 24*time.Hour))
		_, _ = store.Begin(ctx, "b", claim, 10*time.Millisecond)
		time.Sleep(20 * time.Millisecond) // b's lease runs out
		found, err := store.Begin(ctx, "c", claim, time.Minute)
		require.NoError(t, err)
		require.Nil(t, found)
		found, err = store.Begin(ctx, "a", claim, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, found, "a's record was kept")
		assert.True(t, found.Done)
	})
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

// TestStreamingHandlers: a handler may flush (as an http.Flusher or by a
// ResponseController) and may hijack; a flush before WriteHeader is a 200
// as net/http makes it, and a hijacked response is not replayed (nor run
// again).
func TestStreamingHandlers(t *testing.T) {
	var runs atomic.Int64
	h := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		switch r.URL.Path {
		case "/flusher":
			f, ok := w.(http.Flusher)
			if !ok {
				http.Error(w, "no flusher", http.StatusInternalServerError)
				return
			}
			_, _ = io.WriteString(w, "part")
			f.Flush()
		case "/flush-first":
			_ = http.NewResponseController(w).Flush()
			w.WriteHeader(http.StatusCreated) // too late: the 200 went out
		case "/hijack":
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			_, _ = rw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
			_ = rw.Flush()
			conn.Close()
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k"+path)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/flusher")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "part", body)
	code, _ = post("/flush-first")
	replayed, _ := post("/flush-first")
	assert.Equal(t, code, replayed, "the replay has the status the client got")
	code, _ = post("/hijack")
	assert.Equal(t, http.StatusCreated, code)
	require.Eventually(t, func() bool { code, _ = post("/hijack"); return code != http.StatusConflict },
		time.Second, 5*time.Millisecond, "the first is stored as soon as its handler returns")
	assert.Equal(t, http.StatusInternalServerError, code, "not replayable, not run again")
	assert.EqualValues(t, 3, runs.Load(), "each path ran once")
}

// TestOuterHeadersOfTheFirstRequestAreNotStored.
func TestOuterHeadersOfTheFirstRequestAreNotStored(t *testing.T) {
	inner := idempotency.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	cors := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o == "https://a.example" {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		inner.ServeHTTP(w, r)
	})
	post := func(origin string) http.Header {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		cors.ServeHTTP(w, r)
		return w.Header()
	}
	post("https://a.example")
	h := post("https://evil.example")
	assert.Equal(t, "true", h.Get(idempotency.ReplayedHeader))
	assert.Empty(t, h.Get("Access-Control-Allow-Origin"), "the first request's CORS header is not replayed to another origin")
}

// lostAnswerStore's first Complete succeeds but says it timed out.
type lostAnswerStore struct {
	idempotency.Store
	lost atomic.Bool
}

func (s *lostAnswerStore) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	err := s.Store.Complete(ctx, key, claim, rec, ttl)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return context.DeadlineExceeded
	}
	return err
}

func TestARetriedSaveThatHadGotThroughIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlowServer(&lostAnswerStore{Store: idempotency.NewMemoryStore(0)}, time.Millisecond)
		s.post(t.Context(), "k", "")
		assert.NotContains(t, s.events.list(), "not_stored")
		assert.Equal(t, "true", s.post(t.Context(), "k", "").Header().Get(idempotency.ReplayedHeader))
	})
}
