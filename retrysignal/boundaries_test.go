package retrysignal_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// TestParseAttemptDigitsAndLengths: every digit, 9 included, reads as its
// value in every position (so "10/19" is ten of nineteen, not 0 of 9), up
// to nine digits a number, and not one more; the characters just outside
// '0'..'9' are refused.
func TestParseAttemptDigitsAndLengths(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want retrysignal.Attempt
		ok   bool
	}{
		{"9/9", retrysignal.Attempt{N: 9, Max: 9}, true},
		{"9", retrysignal.Attempt{N: 9}, true},
		{"10/19", retrysignal.Attempt{N: 10, Max: 19}, true},
		{"90/99", retrysignal.Attempt{N: 90, Max: 99}, true},
		{"12/0", retrysignal.Attempt{N: 12}, true},
		{"123456789/987654321", retrysignal.Attempt{N: 123456789, Max: 987654321}, true}, // nine digits each
		{"999999999/0", retrysignal.Attempt{N: 999999999}, true},
		{"1234567890/0", retrysignal.Attempt{}, false}, // ten digits
		{"1/1234567890", retrysignal.Attempt{}, false},
		{"0000000001/1", retrysignal.Attempt{}, false}, // ten characters, whatever their value
		{"000000001/1", retrysignal.Attempt{N: 1, Max: 1}, true},
		{"1:/3", retrysignal.Attempt{}, false}, // ':' follows '9'
		{"1/3:", retrysignal.Attempt{}, false},
		{"1/", retrysignal.Attempt{}, false},
		{"/3", retrysignal.Attempt{}, false},
	} {
		got, ok := retrysignal.ParseAttempt(tt.in)
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

// TestHandlerAnswersAfterAnInformationalResponse: a 1xx (103 Early Hints)
// does not start the response, so an error after it is still answered,
// with the signal; a 200 does start it, and the error is then only logged.
func TestHandlerAnswersAfterAnInformationalResponse(t *testing.T) {
	failed := &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: errors.New("dependency down")}
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		case "/ok-then-error":
			w.WriteHeader(http.StatusOK)
		}
		return failed
	}))
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	resp, body := get("/hints")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "answered after the 103")
	assert.True(t, retrysignal.NoRetry(resp.Header))
	assert.Contains(t, body, "do not retry")

	resp, body = get("/ok-then-error")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a 200 started the response")
	assert.False(t, retrysignal.NoRetry(resp.Header))
	assert.Empty(t, body, "nothing appended")
}

// TestAttemptStringWritesItsFields: String writes "n/max" of whatever N
// and Max hold, the common small values as the rare ones (max 9 and 10
// alike, n above max, a zero), marked "; hedge" for a hedge.
func TestAttemptStringWritesItsFields(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 9, 10, 11, 123456789} {
		for _, m := range []int{0, 1, 3, 9, 10, 12} {
			for _, hedge := range []bool{false, true} {
				want := fmt.Sprintf("%d/%d", n, m)
				if hedge {
					want += "; hedge"
				}
				assert.Equal(t, want, retrysignal.Attempt{N: n, Max: m, Hedge: hedge}.String())
			}
		}
	}
}

// TestStatusOfAJoinIsWhatItCarries: an error joined after another (a
// close that failed too, say) keeps its meaning: the status is that of
// what the join carries, wherever it is in the join, not of its first
// error.
func TestStatusOfAJoinIsWhatItCarries(t *testing.T) {
	closeFailed := errors.New("close: connection reset")
	open := breaker.New("dep", breaker.ConsecutiveFailures(1))
	_ = open.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	rejected := open.Execute(context.Background(), func(context.Context) error { return nil })
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"a 404", answer(404), http.StatusNotFound},
		{"a 429", answer(429), http.StatusTooManyRequests},
		{"the time budget spent", &retrypolicy.Error{Attempts: 2, Reason: retrypolicy.ErrOutOfTime, Last: errors.New("slow")}, http.StatusGatewayTimeout},
		{"an attempt timed out", context.DeadlineExceeded, http.StatusGatewayTimeout},
		{"the breaker open", rejected, http.StatusServiceUnavailable},
		{"a dependency's failure not to retry", resilience.Terminal(errors.New("500")), http.StatusBadGateway},
		{"our request was bad", resilience.Permanent(errors.New("400")), http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, retrysignal.Status(tc.err), "alone")
			assert.Equal(t, tc.want, retrysignal.Status(errors.Join(closeFailed, tc.err)), "joined after another error")
			assert.Equal(t, tc.want, retrysignal.Status(fmt.Errorf("get: %w", errors.Join(closeFailed, tc.err))), "joined, then wrapped")
		})
	}
	assert.Equal(t, http.StatusServiceUnavailable, retrysignal.Status(errors.Join(closeFailed, errors.New("reset"))), "a join of transient errors")
}
