// Package retrysignal stops retries multiplying through a chain of
// services: it carries, from hop to hop, what an attempt is and whether its
// caller should retry.
//
// With 3 attempts at each of the 4 services of a chain, one user request
// can reach the last one 3^3 = 27 times, just when it is least able to take
// it (Google's SRE book, Handling Overload). The remedy is to retry only at
// the layer directly above the one that failed. So a service whose own
// outbound call failed after its resilient client had done what it could
// (retries, a quota, a breaker, its time budget) answers its caller with a
// "don't retry" signal, the [NoRetryHeader] response header, and keeps the
// status's meaning (503 stays 503). A resilient client that gets the signal
// from a service it trusts treats the answer as terminal for this call:
// not retried, still a breaker failure, its Retry-After ignored
// (package httpclient does this; see its TrustNoRetry).
//
// Outbound, each attempt says what it is in the [AttemptHeader] request
// header: its number and the most its caller will make. Inbound,
// [Middleware] puts it into the request's context ([FromContext]), beside
// the deadline that package deadline puts there, so a handler knows
// whether its caller will retry. [WriteError] and [Handler] answer with the
// signal for a handler whose outbound call failed.
package retrysignal

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// AttemptHeader is the request header that says which attempt a request
// is: "n/max", n from 1, max the most attempts the caller makes (0: no
// limit but its time budget).
const AttemptHeader = "Request-Attempt"

// NoRetryHeader is the response header by which a service asks its caller
// not to retry: "1". The service already retried what could be retried,
// below it.
const NoRetryHeader = "No-Retry"

// Attempt is which attempt of its caller's a request is.
type Attempt struct {
	// N is the attempt's number, 1 for the first.
	N int
	// Max is the most attempts the caller makes, 0 for no limit but its
	// time budget.
	Max int
}

// WillRetry reports whether the caller may make another attempt if this
// one fails.
func (a Attempt) WillRetry() bool { return a.Max == 0 || a.N < a.Max }

// String returns the header value, "n/max".
func (a Attempt) String() string { return strconv.Itoa(a.N) + "/" + strconv.Itoa(a.Max) }

// ParseAttempt reads an [AttemptHeader] value: "n/max" with 1 <= n, and
// n <= max unless max is 0; a bare "n" is an attempt of unknown limit. It
// reports false for anything else.
func ParseAttempt(v string) (Attempt, bool) {
	ns, ms, hasMax := strings.Cut(strings.TrimSpace(v), "/")
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 || len(ns) > 9 {
		return Attempt{}, false
	}
	if !hasMax {
		return Attempt{N: n}, true
	}
	m, err := strconv.Atoi(ms)
	if err != nil || m < 0 || len(ms) > 9 || (m > 0 && n > m) {
		return Attempt{}, false
	}
	return Attempt{N: n, Max: m}, true
}

type attemptKey struct{}

// FromContext returns the attempt that the request of ctx said it was,
// and whether it said so.
func FromContext(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(Attempt)
	return a, ok
}

// Middleware puts the request's [AttemptHeader] into its context, for
// [FromContext]. A missing, repeated or malformed header is ignored. Use it
// with deadline.Middleware, which does the same for the time budget. It is
// safe for concurrent use.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if vs := r.Header.Values(AttemptHeader); len(vs) == 1 {
			if a, ok := ParseAttempt(vs[0]); ok {
				r = r.WithContext(context.WithValue(r.Context(), attemptKey{}, a))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// NoRetry reports whether h, a response's header, asks not to retry.
func NoRetry(h http.Header) bool { return h.Get(NoRetryHeader) == "1" }

// Status returns the status with which a service answers when its own
// outbound call failed with err, as a pipeline or the httpclient returns
// it: 504 when the time ran out, 503 when the dependency is down, busy or
// shielded by an open breaker, the retries or the retry quota ran out, or
// the caller went away; 502 when the dependency failed in a way a retry
// would not fix; 500 when the request this service made was at fault.
func Status(err error) int {
	switch {
	case errors.Is(err, retrypolicy.ErrOutOfTime):
		return http.StatusGatewayTimeout
	case errors.Is(err, breaker.ErrOpen), errors.Is(err, breaker.ErrTooManyRequests):
		return http.StatusServiceUnavailable
	}
	switch resilience.Classify(err) {
	case resilience.ClassTerminal:
		return http.StatusBadGateway
	case resilience.ClassPermanent:
		return http.StatusInternalServerError
	default: // transient, given up on, or canceled
		return http.StatusServiceUnavailable
	}
}

// WriteError answers a request whose handler's outbound call failed with
// err: the status of [Status], the [NoRetryHeader] (its caller must not
// retry: this service did), and a problem document. Nothing was written to
// w before.
func WriteError(w http.ResponseWriter, err error) {
	status := Status(err)
	h := w.Header()
	h.Set(NoRetryHeader, "1")
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"status":` + strconv.Itoa(status) + `,"title":` + strconv.Quote(http.StatusText(status)) +
		`,"detail":"a dependency failed after retrying; do not retry"}` + "\n"))
}

// Handler is an http.Handler whose function returns the error of its
// outbound call, answered by [WriteError]; a nil error means the function
// answered itself.
type Handler func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP calls h and answers its error, if any, by [WriteError].
func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		WriteError(w, err)
	}
}
