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
// signal for a handler whose outbound call failed, [ProxyErrorHandler] for
// a reverse proxy.
package retrysignal

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// AttemptHeader is the request header that says which attempt a request
// is: "n/max", n from 1, max the most attempts the caller makes (0: no
// limit but its time budget); "n/max; hedge" for a hedge, a twin of
// attempt n sent while it still ran.
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
	// Hedge is true for a hedge: a twin of attempt N, sent while it was
	// still running. Hedges are not attempts of their own: N never goes
	// past Max for them.
	Hedge bool
}

// WillRetry reports whether the caller may make another attempt if this
// one fails.
func (a Attempt) WillRetry() bool { return a.Max == 0 || a.N < a.Max }

// hedgeSuffix marks a hedge's header value.
const hedgeSuffix = "; hedge"

// String returns the header value, "n/max", or "n/max; hedge".
func (a Attempt) String() string {
	if !a.Hedge && a.N >= 1 && a.N <= a.Max && a.Max < len(common) {
		return common[a.Max][a.N]
	}
	s := strconv.Itoa(a.N) + "/" + strconv.Itoa(a.Max)
	if a.Hedge {
		s += hedgeSuffix
	}
	return s
}

// common holds the values of the attempts of most calls, "n/max" for
// 1 <= n <= max <= 9, made once: [common][max][n].
var common = func() (c [10][10]string) {
	for m := 1; m < len(c); m++ {
		for n := 1; n <= m; n++ {
			c[m][n] = strconv.Itoa(n) + "/" + strconv.Itoa(m)
		}
	}
	return c
}()

// ParseAttempt reads an [AttemptHeader] value: "n/max", both in ASCII
// digits, with 1 <= n, and n <= max unless max is 0, followed by "; hedge"
// for a hedge; a bare "n" is an attempt whose caller did not say its
// limit, taken as no limit. It reports false for anything else.
func ParseAttempt(v string) (Attempt, bool) {
	v = strings.TrimSpace(v)
	v, hedge := strings.CutSuffix(v, hedgeSuffix)
	a, ok := parseNumbers(v)
	a.Hedge = hedge && ok
	return a, ok
}

// parseNumbers reads "n/max" or "n".
func parseNumbers(v string) (Attempt, bool) {
	ns, ms, hasMax := strings.Cut(v, "/")
	n, ok := digits(ns)
	if !ok || n < 1 {
		return Attempt{}, false
	}
	if !hasMax {
		return Attempt{N: n}, true
	}
	m, ok := digits(ms)
	if !ok || (m > 0 && n > m) {
		return Attempt{}, false
	}
	return Attempt{N: n, Max: m}, true
}

// digits reads 1 to 9 ASCII digits.
func digits(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
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

// httpStatus is implemented by an error that is an HTTP answer, such as
// httpclient's StatusError.
type httpStatus interface {
	HTTPStatus() int
}

// Status returns the status with which a service answers when its own
// outbound call failed with err, as a pipeline or the httpclient returns
// it, keeping the failure's meaning: 504 when its time budget ran out,
// every attempt timed out, or the retry that an answer called for did not
// fit in it (a 429, 503 or 409 whose Retry-After did not fit: a caller
// with more time may retry, where the dependency's status, without its
// Retry-After, could tell it not to); the dependency's own status when it
// answered with a 4xx or 5xx otherwise (503 stays 503, 404 stays 404; a gRPC dependency's
// code as the HTTP status that stands for it, where its error says so, as
// grpcclient's does: NOT_FOUND is 404), 502 when it answered with another
// (a 304, a 101, or a status no server should send); 503 when the breaker
// is open or busy, the retries or the retry quota ran out on errors
// without an answer, or the caller went away; 502 for another failure
// that a retry would not fix; 500 when the request this service made was
// at fault, or when a method of err panics as it is asked (this service's
// own error).
func Status(err error) int {
	if s, ok := classify.Ask(statusOf, resilience.Acyclic(err)); ok { // one that wraps itself would hang errors.Is
		return s
	}
	return http.StatusInternalServerError
}

// statusOf is Status, for an error whose methods answer.
func statusOf(err error) int {
	var answered httpStatus
	switch {
	case errors.Is(err, retrypolicy.ErrOutOfTime):
		return http.StatusGatewayTimeout
	case errors.As(err, &answered):
		if s := answered.HTTPStatus(); s >= 400 && s <= 599 {
			return s
		}
		return http.StatusBadGateway // not a failure's status to its caller, or not one at all
	case breaker.IsRejection(err):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout // the attempts timed out
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
// err, and whose response has not started: the status of [Status], the
// [NoRetryHeader] (the caller must not retry: this service's resilient
// client already did what retrying it would), and a problem document,
// which no cache keeps (Cache-Control: no-store). Headers the handler set
// that would contradict it (Content-Length, Content-Encoding,
// Content-Range, Retry-After, ETag, Last-Modified, Expires) are dropped,
// and those it sets (Cache-Control, Content-Type, No-Retry) replace the
// handler's, in any spelling: net/http sends a key of the map as it is.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err, true) }

// replacedHeaders are the headers writeError drops from the handler's: those
// it may have set for the answer it meant to give, which a problem
// document would contradict, and those writeError sets itself.
var replacedHeaders = [...]string{"Content-Length", "Content-Encoding", "Content-Range", "Retry-After", "ETag", "Last-Modified", "Expires",
	"Cache-Control", "Content-Type", NoRetryHeader}

// replaced reports whether k, in any spelling, is one of replacedHeaders.
func replaced(k string) bool {
	for _, c := range replacedHeaders {
		if strings.EqualFold(k, c) {
			return true
		}
	}
	return false
}

// writeError is [WriteError], with the [NoRetryHeader] only if signal.
func writeError(w http.ResponseWriter, err error, signal bool) {
	status := Status(err)
	h := w.Header()
	for k := range h { // in any spelling: one the handler copied into the map as it came (review125, review158, review161)
		if replaced(k) {
			delete(h, k)
		}
	}
	detail := "a dependency failed"
	if signal {
		h.Set(NoRetryHeader, "1")
		detail = "a dependency failed after retrying; do not retry"
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"status":` + strconv.Itoa(status) + `,"title":` + strconv.Quote(http.StatusText(status)) +
		`,"detail":"` + detail + `"}` + "\n"))
}

// Handler is an http.Handler whose function returns the error of its
// outbound call; a nil error means the function answered itself. The
// error is answered by [WriteError], with the signal, if it says that the
// layer below did what retrying it would ([Retried]); another, such as a
// plain http.Client's, or one attempt that nobody retried (a POST without
// an idempotency key), is answered in the same way but without the
// signal (a [NoRetryHeader] the function copied from its dependency's
// answer dropped), so that the caller may retry what nobody below did. A function
// that makes an error of its own of a resilient call's failure (an SDK
// over httpclient's Transport, which hands back the last answer, not an
// error) says so by marking it: resilience.Terminal(err). An error
// returned after the function started its response cannot be answered: it
// is logged with log/slog's default logger, and the response is left as
// it is.
type Handler func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP calls h and answers its error, if any.
func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &startedWriter{ResponseWriter: w, h2: r.ProtoMajor >= 2}
	err := h(sw.as(w), r)
	switch {
	case err == nil:
	case sw.started:
		slog.Error("retrysignal: a handler failed after starting its response", "path", r.URL.Path, "error", err)
	default:
		writeError(w, err, Retried(err))
	}
}

// ProxyErrorHandler answers, as [Handler] does, a request that an
// httputil.ReverseProxy over httpclient's Transport could not forward: for
// its ErrorHandler. The proxy passes on the signal of an answer the
// dependency gave; with no answer (a refused or reset connection, a
// timeout, an open breaker), the Transport returns an error, which the
// proxy's default ErrorHandler answers with a 502 and no signal, and the
// caller retries what this hop's Transport already retried. The status is
// [Status]'s, also for an error of the proxy's own (its ModifyResponse's):
// 503 for one of no class, where the default answers 502 to all. A
// ModifyResponse that makes an error of an answer hands the proxy its
// own error, which says nothing of the retries below: if the answer
// carries this hop's signal, the Transport did what retrying would, and
// the error must say so, as [Handler]'s function says it, or the caller
// retries what this hop already did (review158). It is safe for
// concurrent use.
//
//	proxy.ErrorHandler = retrysignal.ProxyErrorHandler
//	proxy.ModifyResponse = func(resp *http.Response) error {
//		if resp.StatusCode >= 500 {
//			err := fmt.Errorf("upstream answered %d", resp.StatusCode)
//			if retrysignal.NoRetry(resp.Header) {
//				err = resilience.Terminal(err)
//			}
//			return err
//		}
//		return nil
//	}
func ProxyErrorHandler(w http.ResponseWriter, _ *http.Request, err error) {
	writeError(w, err, Retried(err))
}

// Retried reports whether err, a resilient outbound call's, says that the
// call did what retrying it would, so that its caller must not retry: its
// breaker refused it (the dependency is down), its retry policy (or that
// of a resilient call inside its operation, such as an SDK's over
// httpclient's Transport) made more than one attempt or its retry quota
// refused a retry, its hedging sent a hedge (pipeline.Hedged), it ran out
// of its caller's time (the deadline of the request's context, which the
// caller propagated: the caller has no more), even before a retry it had
// no time for, or the dependency's answer was not to be retried (a class
// of permanent or terminal of its own in err's chain, as httpclient and
// grpcclient give it). One attempt that failed and that nobody retried is
// not: a POST without an idempotency key, one that ran out of this
// service's own time budget (retrypolicy.Error's OwnBudget: its caller,
// with more time, may retry it), a plain client's error. A deadline the
// handler set on its own context, rather than a pipeline's time budget, is
// taken for the caller's. An error whose methods panic as they are asked
// is not. [Handler] answers with the signal what it reports, and
// grpcsignal's server interceptors pass on only that.
func Retried(err error) bool { return classify.Holds(retried, resilience.Acyclic(err)) }

// retried is Retried, for an error whose methods answer.
func retried(err error) bool {
	if breaker.IsRejection(err) {
		return true
	}
	// Whose time ran out, the outermost retry loop's error says (an inner
	// one's deadline may be the outer's own budget); a retry made, or
	// refused by a quota, any of them.
	if re := (*retrypolicy.Error)(nil); errors.As(err, &re) && errors.Is(re.Reason, retrypolicy.ErrOutOfTime) && !re.OwnBudget {
		return true
	}
	if retriedBelow(err) || pipeline.Hedged(err) {
		return true
	}
	c, ok := resilience.ClassOf(err) // one attempt: an answer not to be retried (a CANCELED, a proxy's reset, is not one)
	return ok && (c == resilience.ClassPermanent || c == resilience.ClassTerminal)
}

// retriedBelow reports whether a retry loop's error in err's tree made
// more than one attempt or had its quota refuse a retry: that of a
// pipeline nested in another's operation too.
func retriedBelow(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *retrypolicy.Error:
		if e.Attempts > 1 || errors.Is(e.Reason, retrypolicy.ErrQuotaExhausted) {
			return true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return retriedBelow(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if retriedBelow(e) {
				return true
			}
		}
	}
	return false
}

// startedWriter notes whether the response started.
type startedWriter struct {
	http.ResponseWriter
	started bool
	h2      bool // HTTP/2, whose server sends a 101 as informational (review161)
}

func (w *startedWriter) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols && !w.h2 { // 101 is final over HTTP/1, as net/http takes it (review158)
		w.started = true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *startedWriter) Write(p []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(p)
}

// ReadFrom sends what r reads as the body, as net/http's own writer does:
// its first 512 bytes (fewer if r ends before) by Write, flushed, the rest
// by the server's writer's ReadFrom where it has one (sendfile over
// HTTP/1.1). A body that fails or ends before its first byte reaches no
// writer below, which could send the header (a middleware's that writes
// it before delegating): the response has not started, and the error is
// answered (review126, review128). One that reads nothing 100 times in a
// row goes to the writer below as it is (review129).
func (w *startedWriter) ReadFrom(r io.Reader) (int64, error) {
	var first [512]byte
	k, err := 0, error(nil)
	for empty := 0; k < len(first) && err == nil && empty < 100; {
		m, rerr := r.Read(first[k:])
		k, err = k+m, rerr
		if m == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	if k == 0 && err != nil {
		if err == io.EOF {
			err = nil
		}
		return 0, err
	}
	n, werr := w.Write(first[:k])
	if werr != nil {
		return int64(n), werr
	}
	if k == len(first) && (err == nil || err == io.EOF) {
		_ = http.NewResponseController(w.ResponseWriter).Flush() // as net/http's ReadFrom does after its first 512 bytes
	}
	switch {
	case err == io.EOF:
		return int64(n), nil
	case err != nil:
		return int64(n), err
	}
	w.started = true
	var rest int64
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		rest, err = rf.ReadFrom(r)
	} else {
		rest, err = io.Copy(struct{ io.Writer }{w.ResponseWriter}, r)
	}
	return int64(n) + rest, err
}

// CloseNotify is the server's writer's, for a handler written before
// request contexts, which may assert it unchecked; where the writer has
// none, a channel that never fires.
func (w *startedWriter) CloseNotify() <-chan bool {
	if cn, ok := w.ResponseWriter.(http.CloseNotifier); ok { //nolint:staticcheck // a handler's deprecated but real use
		return cn.CloseNotify()
	}
	return nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
// It returns a view that notes a flush or hijack made through the
// controller, which reaches them past w.
func (w *startedWriter) Unwrap() http.ResponseWriter { return controlled{w} }

// controlled is what http.ResponseController finds below the handler's
// writer: it starts the response as the controller flushes or hijacks.
type controlled struct{ *startedWriter }

func (c controlled) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c controlled) FlushError() error {
	err := http.NewResponseController(c.ResponseWriter).Flush()
	if err == nil {
		c.started = true
	}
	return err
}

func (c controlled) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		c.started = true
	}
	return conn, rw, err
}

// as returns w's writer for the handler: one that is an http.Flusher or
// an http.Hijacker where under (the server's writer) is, so that a handler
// that tests for them finds what it would find without Handler.
func (w *startedWriter) as(under http.ResponseWriter) http.ResponseWriter {
	_, f := under.(http.Flusher)
	_, h := under.(http.Hijacker)
	switch {
	case f && h:
		return flushHijacker{w}
	case f:
		return flusher{w}
	case h:
		return hijacker{w}
	}
	return w
}

// flusher starts the response as it flushes it, for a handler that
// streams.
type flusher struct{ *startedWriter }

func (w flusher) Flush() {
	w.started = true // the server's writer can flush: what it wrote is sent
	_ = controlled(w).FlushError()
}

// hijacker hands the connection to a handler that takes it over: the
// response is then the handler's.
type hijacker struct{ *startedWriter }

func (w hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) { return controlled(w).Hijack() }

type flushHijacker struct{ *startedWriter }

func (w flushHijacker) Flush() { flusher(w).Flush() }

func (w flushHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) { return controlled(w).Hijack() }
