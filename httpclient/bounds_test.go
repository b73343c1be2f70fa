package httpclient_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestClientSuccessIsExactly2xx: the Client decodes any answer from 200
// to 299, 299 included, and fails 300 and above with a StatusError.
func TestClientSuccessIsExactly2xx(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	c := httpclient.New(fastRetry())
	for _, tc := range []struct {
		status int
		ok     bool
	}{
		{200, true}, {201, true}, {299, true}, {300, false}, {399, false}, {400, false},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			var out struct{ OK bool }
			err := c.GetJSON(t.Context(), fmt.Sprint(srv.URL, "?status=", tc.status), &out)
			if tc.ok {
				require.NoError(t, err)
				assert.True(t, out.OK, "decoded")
				return
			}
			var se *httpclient.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.status, se.StatusCode)
			assert.False(t, out.OK, "not decoded")
		})
	}
}

// TestClientSendsContentTypeOnlyWithABody: the dependency sees a JSON
// Content-Type on a request with a body, none on one without, and an
// Accept of JSON on both.
func TestClientSendsContentTypeOnlyWithABody(t *testing.T) {
	type seen struct{ contentType, accept, body string }
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Content-Type"), r.Header.Get("Accept"), string(b)}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := httpclient.New(fastRetry())
	require.NoError(t, c.PutJSON(t.Context(), srv.URL, map[string]int{"n": 1}, nil))
	assert.Equal(t, seen{"application/json", "application/json", `{"n":1}`}, <-got)
	require.NoError(t, c.GetJSON(t.Context(), srv.URL, nil))
	assert.Equal(t, seen{"", "application/json", ""}, <-got)
}

// TestErrorBodyIsKeptUpToMaxErrorBody: a failed answer's body is kept
// whole up to MaxErrorBody bytes, exactly that many included, and cut to
// them, marked Truncated, when it is a byte longer.
func TestErrorBodyIsKeptUpToMaxErrorBody(t *testing.T) {
	const max = 16
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, strings.Repeat("e", n))
	}))
	defer srv.Close()
	c := httpclient.New(fastRetry(), httpclient.MaxErrorBody(max))
	for _, tc := range []struct {
		n         int
		truncated bool
	}{
		{0, false}, {max - 1, false}, {max, false}, {max + 1, true}, {10 * max, true},
	} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			err := c.GetJSON(t.Context(), fmt.Sprint(srv.URL, "?n=", tc.n), nil)
			var se *httpclient.StatusError
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, strings.Repeat("e", min(tc.n, max)), string(se.Body))
			assert.Equal(t, tc.truncated, se.Truncated)
		})
	}
}

// TestOptionsTakeTheirLeastValue: each bounded option takes its least
// value (the panics for the one below are TestOptionsPanicOnNonsense's),
// and MaxErrorBody(1) keeps one byte.
func TestOptionsTakeTheirLeastValue(t *testing.T) {
	assert.NotPanics(t, func() { httpclient.MaxBreakers(1) })
	assert.NotPanics(t, func() { httpclient.MaxBufferedBody(0) })
	assert.NotPanics(t, func() { httpclient.MaxErrorBody(1) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such order", http.StatusNotFound)
	}))
	defer srv.Close()
	err := httpclient.New(fastRetry(), httpclient.MaxErrorBody(1)).GetJSON(t.Context(), srv.URL, nil)
	var se *httpclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "n", string(se.Body))
	assert.True(t, se.Truncated)
}

// TestBufferedBodyBoundIsExact: a body without GetBody of exactly
// MaxBufferedBody bytes is kept, so its request is retried, the dependency
// seeing it whole on each attempt (two 503s, then a 200); one a byte
// longer is sent once, whole, and its 503 returned.
func TestBufferedBodyBoundIsExact(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max, n   int
		attempts int
	}{
		{"10 of 10", 10, 10, 3},
		{"11 of 10", 10, 11, 1},
		{"1 of 1", 1, 1, 3},
		{"1 of 0", 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flaky{failures: 2}
			srv := newServer(t, f)
			hc := &http.Client{Transport: httpclient.NewTransport(fastRetry(), httpclient.MaxBufferedBody(int64(tc.max)))}
			body := strings.Repeat("b", tc.n)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, onceReader{strings.NewReader(body)})
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			want := http.StatusOK // the third attempt's
			if tc.attempts == 1 {
				want = http.StatusServiceUnavailable // the one attempt's answer, returned as it is
			}
			assert.Equal(t, want, resp.StatusCode)
			f.mu.Lock()
			defer f.mu.Unlock()
			assert.Equal(t, slices.Repeat([]string{body}, tc.attempts), f.bodies, "what the dependency saw")
		})
	}
}

// TestAutoIdempotencyKeyOnlyForPostAndPatch: AutoIdempotencyKey gives a
// key, the same on every attempt, to a POST and a PATCH without one, and
// so retries them; the methods that are retried without a key get none.
func TestAutoIdempotencyKeyOnlyForPostAndPatch(t *testing.T) {
	for _, tc := range []struct {
		method string
		keyed  bool
	}{
		{http.MethodPost, true}, {http.MethodPatch, true},
		{http.MethodGet, false}, {http.MethodPut, false}, {http.MethodDelete, false},
	} {
		t.Run(tc.method, func(t *testing.T) {
			f := &flaky{failures: 2}
			srv := newServer(t, f)
			hc := &http.Client{Transport: httpclient.NewTransport(fastRetry(), httpclient.AutoIdempotencyKey())}
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL, strings.NewReader(`{}`))
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, "retried")
			assert.Empty(t, req.Header.Get("Idempotency-Key"), "the caller's request is not changed")
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Len(t, f.keys, 3)
			if !tc.keyed {
				assert.Equal(t, []string{"", "", ""}, f.keys, "no key")
				return
			}
			assert.NotEmpty(t, f.keys[0])
			assert.Equal(t, []string{f.keys[0], f.keys[0], f.keys[0]}, f.keys, "one key, on every attempt")
		})
	}
}

// TestStatusesOutsideTheTableAreClassedByRange: a status that a server
// should not send, outside 100 to 599, is still classed: below 400 a
// success for the Transport (the Client fails it, permanent), from 600
// terminal: a breaker failure, not retried.
func TestStatusesOutsideTheTableAreClassedByRange(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 " + strings.TrimPrefix(r.URL.Path, "/") + " Odd\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = rw.Flush()
	}))
	c := httpclient.New(fastRetry())
	for _, tc := range []struct {
		status string
		class  resilience.Class
	}{
		{"099", resilience.ClassPermanent},
		{"600", resilience.ClassTerminal},
		{"999", resilience.ClassTerminal},
	} {
		t.Run(tc.status, func(t *testing.T) {
			calls.Store(0)
			err := c.GetJSON(t.Context(), srv.URL+"/"+tc.status, nil)
			var se *httpclient.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.status, fmt.Sprintf("%03d", se.StatusCode))
			assert.Equal(t, tc.class, resilience.Classify(err))
			assert.EqualValues(t, 1, calls.Load(), "not retried")
		})
	}
}
