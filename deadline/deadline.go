// Package deadline carries a call's remaining time budget across HTTP
// hops.
//
// The client sends what is left of its context's deadline as a relative
// duration in whole milliseconds, in the [Header] header, the way gRPC
// sends grpc-timeout: a duration, unlike a wall-clock time, means the same
// on both ends whatever their clocks say. The server's [Middleware] turns
// it back into a context deadline, so its handler, and any call it makes
// in turn, stops working on a request that nobody is waiting for any more.
//
// The budget is the caller's to choose, and [Middleware] takes it from any
// caller. One that sends a budget shorter than the dependency's latency
// makes this service's calls to it run out of time; a breaker (package
// breaker) leaves such a call out, as the caller's doing, when it had less
// time than the dependency's slowest recent answer, or 100 ms, and counts
// the others, so that a dependency that hangs still opens it through the
// calls with time enough. Inject rounds the budget up, so that the hop it
// is sent to runs out of time after its caller, not before: its 504 would
// come back while the caller's own deadline has not passed, as a failure
// of the hop's. Each hop may so add up to a millisecond, and the time its
// request took to arrive, which the budget does not know of: a chain of n
// hops ends up to n ms, plus the requests' time in transit, after the
// first caller's deadline; and a cycle of calls whose hops each take less
// than a millisecond is not ended by the budget alone (each hop's own time
// budget or attempt timeout still ends it). Package httpclient sets the
// header again as the request gets its connection, so that the time it
// waited for one, dialed or shook hands is taken off; the time an HTTP/2
// request waits for a stream on its connection is not, nor the time
// net/http takes to send a request again on a new connection, nor any of
// it behind a base RoundTripper that clones the request before net/http
// sends it (oauth2's, a signing one), which sends the budget as the
// request was made. A pipeline's
// throttle and adaptive concurrency limit learn nothing from an attempt
// that a caller's budget ended; the pipeline's own attempt timeout and
// time budget teach them.
package deadline

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header is the request header that carries the remaining budget, in whole
// milliseconds.
const Header = "Request-Timeout-Ms"

// maxDigits bounds the header's value to 9 digits.
const maxDigits = 9

// MaxBudget is the longest budget the header carries: 999,999,999 ms,
// about 11.6 days. [Inject] sends a longer one as MaxBudget.
const MaxBudget = 999_999_999 * time.Millisecond

// Inject sets h's [Header] to the time left before ctx's deadline, rounded
// up to whole milliseconds (as grpc-go rounds grpc-timeout up) and at most
// [MaxBudget], and reports whether ctx has a deadline. It removes any
// [Header] from h when ctx has none, so a stale value is never forwarded:
// also one under a key of another case (set as h["request-timeout-ms"],
// which http.Header's methods do not see, but which is sent). A deadline
// already past is sent as 0.
func Inject(ctx context.Context, h http.Header) bool {
	for k := range h {
		if k != Header && len(k) == len(Header) && strings.EqualFold(k, Header) {
			delete(h, k)
		}
	}
	d, ok := ctx.Deadline()
	if !ok {
		h.Del(Header)
		return false
	}
	left := min(max(time.Until(d), 0), MaxBudget)
	var buf [maxDigits]byte
	v := strconv.AppendInt(buf[:0], int64((left+time.Millisecond-1)/time.Millisecond), 10)
	if vs := h[Header]; len(vs) == 1 && vs[0] == string(v) {
		return true // as it was: h set again within the same millisecond allocates nothing
	}
	h.Set(Header, string(v))
	return true
}

// Parse reads a [Header] value: 1 to 9 ASCII digits, surrounding spaces or
// tabs allowed. It reports false for anything else.
func Parse(v string) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if len(v) == 0 || len(v) > maxDigits {
		return 0, false
	}
	var ms int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		ms = ms*10 + int64(c-'0')
	}
	return time.Duration(ms) * time.Millisecond, true
}

// Middleware bounds each request's context by the budget in its [Header]:
// the deadline becomes the earlier of now plus that budget and any deadline
// the context already has. A missing, repeated or malformed header is
// ignored, and so is 0: [Inject] sends it only for a caller whose deadline
// has passed, who has gone, and a client of another convention may mean
// "no limit" by it. The header, whether taken or ignored, is taken off the
// request that next gets (a copy): the budget is the context's, and a
// handler that forwards the request's headers (an httputil.ReverseProxy)
// would send the budget as it came, which a hop further on would take
// from when it arrives there. Send what is left with [Inject] instead. It
// is safe for concurrent use.
//
// The budget counts from when Middleware runs: time the request spent
// before it (in transit, or in an outer handler that queues, limits or
// authenticates) is not taken off. Install it outermost, before anything
// that may hold a request.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs := r.Header.Values(Header)
		if len(vs) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		d, ok := Parse(vs[0])
		if len(vs) == 1 && ok && d > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		} else {
			r = r.WithContext(r.Context()) // a copy, whose header below is not the caller's
		}
		r.Header = r.Header.Clone()
		r.Header.Del(Header) // the budget is the context's now, or none: a proxy that forwards the headers sends none stale
		next.ServeHTTP(w, r)
	})
}
