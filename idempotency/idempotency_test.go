package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotency/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore(0) })
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

func TestMemoryStoreIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(3)
		ctx := t.Context()
		for i := range 5 {
			found, err := store.Begin(ctx, fmt.Sprint(i), idempotency.Record{Token: "t"}, time.Minute)
			require.NoError(t, err)
			require.Nil(t, found)
		}
		assert.Equal(t, 3, store.Len())
		found, _ := store.Begin(ctx, "0", idempotency.Record{Token: "t"}, time.Minute)
		assert.Nil(t, found, "the oldest was evicted")
		found, _ = store.Begin(ctx, "4", idempotency.Record{Token: "t"}, time.Minute)
		assert.NotNil(t, found, "the newest was kept")

		time.Sleep(time.Minute)
		_, _ = store.Begin(ctx, "new", idempotency.Record{Token: "t"}, time.Minute)
		assert.Equal(t, 1, store.Len(), "expired claims are dropped")
	})
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
