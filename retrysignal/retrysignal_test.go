package retrysignal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// TestMain checks that no test leaves a goroutine behind: some serve
// over a real connection.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAttempt(t *testing.T) {
	tests := []struct {
		in   string
		want retrysignal.Attempt
		ok   bool
	}{
		{"1/3", retrysignal.Attempt{N: 1, Max: 3}, true},
		{"3/3", retrysignal.Attempt{N: 3, Max: 3}, true},
		{" 2/0 ", retrysignal.Attempt{N: 2, Max: 0}, true},
		{"7", retrysignal.Attempt{N: 7}, true},
		{"4/3", retrysignal.Attempt{}, false},
		{"0/3", retrysignal.Attempt{}, false},
		{"-1/3", retrysignal.Attempt{}, false},
		{"1/-3", retrysignal.Attempt{}, false},
		{"", retrysignal.Attempt{}, false},
		{"a/b", retrysignal.Attempt{}, false},
		{"1/3/5", retrysignal.Attempt{}, false},
		{"99999999999999999999/1", retrysignal.Attempt{}, false},
		{"+1/+3", retrysignal.Attempt{}, false},
		{"1/-0", retrysignal.Attempt{}, false},
		{"１/3", retrysignal.Attempt{}, false},
		{"2/3; hedge", retrysignal.Attempt{N: 2, Max: 3, Hedge: true}, true},
		{"2; hedge", retrysignal.Attempt{N: 2, Hedge: true}, true},
		{"4/3; hedge", retrysignal.Attempt{}, false},
		{"; hedge", retrysignal.Attempt{}, false},
		{"2/3;hedge", retrysignal.Attempt{}, false},
	}
	for _, tt := range tests {
		if tt.ok && strings.Contains(tt.in, "/") {
			assert.Equal(t, strings.TrimSpace(tt.in), tt.want.String(), "String is the header value")
		}
		got, ok := retrysignal.ParseAttempt(tt.in)
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzParseAttempt(f *testing.F) {
	for _, s := range []string{"1/3", "3/3", "7", "0/0", "4/3", " 2/0", "1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := retrysignal.ParseAttempt(s)
		if !ok {
			return
		}
		assert.GreaterOrEqual(t, a.N, 1)
		assert.GreaterOrEqual(t, a.Max, 0)
		back, ok := retrysignal.ParseAttempt(a.String())
		assert.True(t, ok, "what String writes, ParseAttempt reads")
		assert.Equal(t, a, back)
	})
}

func TestWillRetry(t *testing.T) {
	assert.True(t, retrysignal.Attempt{N: 1, Max: 3}.WillRetry())
	assert.False(t, retrysignal.Attempt{N: 3, Max: 3}.WillRetry())
	assert.True(t, retrysignal.Attempt{N: 9, Max: 0}.WillRetry(), "no limit but the time budget")
	assert.False(t, retrysignal.Attempt{N: 1, Max: 1}.WillRetry(), "a single attempt")
}

func TestMiddlewarePutsTheAttemptInTheContext(t *testing.T) {
	var got retrysignal.Attempt
	var ok bool
	h := retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = retrysignal.FromContext(r.Context())
	}))
	for _, tt := range []struct {
		header []string
		want   retrysignal.Attempt
		ok     bool
	}{
		{[]string{"2/3"}, retrysignal.Attempt{N: 2, Max: 3}, true},
		{nil, retrysignal.Attempt{}, false},
		{[]string{"2/3", "1/3"}, retrysignal.Attempt{}, false},
		{[]string{"junk"}, retrysignal.Attempt{}, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header[retrysignal.AttemptHeader] = tt.header
		h.ServeHTTP(httptest.NewRecorder(), r)
		assert.Equal(t, tt.ok, ok, "%q", tt.header)
		assert.Equal(t, tt.want, got, "%q", tt.header)
	}
}

func TestStatusKeepsItsMeaning(t *testing.T) {
	open := breaker.New("dep", breaker.ConsecutiveFailures(1))
	_ = open.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	rejected := open.Execute(context.Background(), func(context.Context) error { return nil })
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"breaker open", rejected, http.StatusServiceUnavailable},
		{"retries used up on a 503", &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: errors.New("503")}, http.StatusServiceUnavailable},
		{"quota spent", &retrypolicy.Error{Attempts: 1, Reason: retrypolicy.ErrQuotaExhausted, Last: errors.New("reset")}, http.StatusServiceUnavailable},
		{"time budget spent", &retrypolicy.Error{Attempts: 2, Reason: retrypolicy.ErrOutOfTime, Last: errors.New("slow")}, http.StatusGatewayTimeout},
		{"a dependency's 500", resilience.Terminal(errors.New("500")), http.StatusBadGateway},
		{"our request was bad", resilience.Permanent(errors.New("400")), http.StatusInternalServerError},
		{"the caller went away", fmt.Errorf("get: %w", context.Canceled), http.StatusServiceUnavailable},
		{"503 stays 503", &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: answer(503)}, http.StatusServiceUnavailable},
		{"404 stays 404: not a failure one hop up", answer(404), http.StatusNotFound},
		{"a dependency's 500 stays 500", answer(500), http.StatusInternalServerError},
		{"429 stays 429", answer(429), http.StatusTooManyRequests},
		{"every attempt timed out", &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: context.DeadlineExceeded}, http.StatusGatewayTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, retrysignal.Status(tt.err))
			w := httptest.NewRecorder()
			retrysignal.WriteError(w, tt.err)
			assert.Equal(t, tt.want, w.Code)
			assert.True(t, retrysignal.NoRetry(w.Header()), "the caller is told not to retry")
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		})
	}
}

// answer is an error that is an HTTP answer of status code.
type answer int

func (a answer) Error() string   { return http.StatusText(int(a)) }
func (a answer) HTTPStatus() int { return int(a) }

func TestHandlerLeavesAStartedResponse(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = w.Write([]byte("partial"))
		return errors.New("failed midway")
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, "partial", w.Body.String(), "nothing appended")
	assert.False(t, retrysignal.NoRetry(w.Header()))
}

func TestWriteErrorDropsContradictingHeaders(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "3")
	w.Header().Set("Retry-After", "5")
	retrysignal.WriteError(w, errors.New("down"))
	assert.Empty(t, w.Header().Get("Content-Length"))
	assert.Empty(t, w.Header().Get("Retry-After"))
}

func TestHandlerAnswersItsError(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/ok" {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		return &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: errors.New("503")}
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/ok", nil))
	assert.Equal(t, http.StatusNoContent, w.Code)
	assert.False(t, retrysignal.NoRetry(w.Header()))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/fail", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.True(t, retrysignal.NoRetry(w.Header()))
}

// TestHandlerSignalsOnlyWhatWasRetried: an error that did not come out of
// a resilient client (a plain http.Client's, the handler's own) is
// answered without the signal, so that the caller may retry what nobody
// below did; one that did, with it.
func TestHandlerSignalsOnlyWhatWasRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		signal bool
	}{
		{"a plain client's", errors.New("c answered 503"), false},
		{"a pipeline's", &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: errors.New("503")}, true},
		{"a classed one", resilience.Terminal(errors.New("500")), true},
		{"out of the caller's time after one attempt", &retrypolicy.Error{Attempts: 1, Reason: retrypolicy.ErrOutOfTime, Last: errors.New("503")}, true},
		{"out of its own budget after one attempt", &retrypolicy.Error{Attempts: 1, Reason: retrypolicy.ErrOutOfTime, Last: errors.New("503"), OwnBudget: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			retrysignal.Handler(func(http.ResponseWriter, *http.Request) error { return tc.err }).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			assert.Equal(t, tc.signal, retrysignal.NoRetry(w.Header()))
			assert.Equal(t, tc.signal, strings.Contains(w.Body.String(), "do not retry"))
			assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
			assert.Equal(t, tc.signal, retrysignal.Retried(tc.err))
		})
	}
}

// TestStatusOfAnAnswerThatIsNoFailure: a dependency's answer that is not a
// 4xx or 5xx (a 304, a 101, a status no server should send) is a 502 to
// the caller: passed up, it would read as no failure, or panic in
// WriteHeader.
func TestStatusOfAnAnswerThatIsNoFailure(t *testing.T) {
	for _, s := range []int{0, 99, 101, 200, 304, 399, 600, 999} {
		assert.Equal(t, http.StatusBadGateway, retrysignal.Status(statusErr(s)), "%d", s)
	}
	for _, s := range []int{400, 404, 499, 500, 503, 599} {
		assert.Equal(t, s, retrysignal.Status(statusErr(s)), "%d", s)
	}
}

type statusErr int

func (e statusErr) Error() string   { return "answered " + strconv.Itoa(int(e)) }
func (e statusErr) HTTPStatus() int { return int(e) }
