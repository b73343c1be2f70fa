package httpclient_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestOptionsPanicOnNonsense: each nonsense option panics with a message
// that names it.
func TestOptionsPanicOnNonsense(t *testing.T) {
	for _, tc := range []struct {
		option string // the name the message starts with
		make   func() httpclient.Option
	}{
		{"MaxBreakers(0)", func() httpclient.Option { return httpclient.MaxBreakers(0) }},
		{"MaxErrorBody(0)", func() httpclient.Option { return httpclient.MaxErrorBody(0) }},
		{"MaxBufferedBody(-1)", func() httpclient.Option { return httpclient.MaxBufferedBody(-1) }},
		{"TrustNoRetry(nil)", func() httpclient.Option { return httpclient.TrustNoRetry(nil) }},
		{`RetryMethods("POSTT")`, func() httpclient.Option { return httpclient.RetryMethods("POSTT") }},
		{`RetryMethods("patch")`, func() httpclient.Option { return httpclient.RetryMethods("patch") }},
		{`RetryMethods("")`, func() httpclient.Option { return httpclient.RetryMethods("") }},
		{`RetryMethods("GET ")`, func() httpclient.Option { return httpclient.RetryMethods("GET ") }},
		{`RetryMethods("PROP FIND")`, func() httpclient.Option { return httpclient.RetryMethods("PATCH", "PROP FIND") }},
		{"ClassifyStatus(99, transient)", func() httpclient.Option { return httpclient.ClassifyStatus(99, resilience.ClassTransient) }},
		{"ClassifyStatus(600, transient)", func() httpclient.Option { return httpclient.ClassifyStatus(600, resilience.ClassTransient) }},
		{"ClassifyStatus(-503, transient)", func() httpclient.Option { return httpclient.ClassifyStatus(-503, resilience.ClassTransient) }},
		{"ClassifyStatus(101, permanent)", func() httpclient.Option { return httpclient.ClassifyStatus(101, resilience.ClassPermanent) }},
		{"ClassifyStatus(200, transient)", func() httpclient.Option { return httpclient.ClassifyStatus(200, resilience.ClassTransient) }},
		{"ClassifyStatus(204, terminal)", func() httpclient.Option { return httpclient.ClassifyStatus(204, resilience.ClassTerminal) }},
		{"ClassifyStatus(304, canceled)", func() httpclient.Option { return httpclient.ClassifyStatus(304, resilience.ClassCanceled) }},
		{"ClassifyStatus(503, rejected)", func() httpclient.Option { return httpclient.ClassifyStatus(503, resilience.ClassRejected) }},
		{fmt.Sprintf("ClassifyStatus(503, %v)", resilience.Class(42)), func() httpclient.Option {
			return httpclient.ClassifyStatus(503, resilience.Class(42))
		}},
	} {
		t.Run(tc.option, func(t *testing.T) {
			defer func() {
				r := recover()
				if assert.NotNil(t, r, "no panic") {
					assert.True(t, strings.HasPrefix(fmt.Sprint(r), "httpclient: "+tc.option+": "), "the panic %q names the option", r)
				}
			}()
			tc.make()
		})
	}
	assert.NotPanics(t, func() {
		httpclient.New(nil, httpclient.RetryMethods(), httpclient.RetryMethods(http.MethodPatch, http.MethodPost, http.MethodTrace),
			httpclient.ClassifyStatus(200, resilience.ClassSuccess), httpclient.ClassifyStatus(599, resilience.ClassCanceled),
			httpclient.ClassifyStatus(100, resilience.ClassSuccess), httpclient.ClassifyStatus(404, resilience.ClassSuccess))
	})
}

// TestRetryMethodsAddsToTheDefaults: a method named by RetryMethods is
// retried without a key, and so, still, are GET, HEAD, OPTIONS, PUT and
// DELETE; POST and PATCH are not unless named.
func TestRetryMethodsAddsToTheDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []httpclient.Option
		retried map[string]bool
	}{
		{name: "defaults", retried: map[string]bool{
			http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true, http.MethodPut: true, http.MethodDelete: true}},
		{name: "RetryMethods(PATCH)", opts: []httpclient.Option{httpclient.RetryMethods(http.MethodPatch)}, retried: map[string]bool{
			http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true, http.MethodPut: true, http.MethodDelete: true,
			http.MethodPatch: true}},
		{name: "given twice, both count", opts: []httpclient.Option{httpclient.RetryMethods(http.MethodPatch), httpclient.RetryMethods(http.MethodPost)},
			retried: map[string]bool{
				http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true, http.MethodPut: true, http.MethodDelete: true,
				http.MethodPatch: true, http.MethodPost: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
			}))
			hc := &http.Client{Transport: httpclient.NewTransport(append(tc.opts, fastRetry())...)}
			for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete,
				http.MethodPatch, http.MethodPost} {
				calls.Store(0)
				req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, strings.NewReader("x"))
				require.NoError(t, err)
				resp, err := hc.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				want := int64(1)
				if tc.retried[method] {
					want = 4
				}
				assert.Equal(t, want, calls.Load(), "%s: attempts", method)
			}
		})
	}
}

// TestClassifyStatus: ClassifyStatus changes the class of one status on top
// of the defaults, a later call for the same status winning.
func TestClassifyStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []httpclient.Option
		status   int
		attempts int64
		class    resilience.Class // of the Client's error
		failure  bool             // a breaker failure
		succeeds bool             // the pipeline's call is a success
	}{
		{name: "404 by default", status: 404, attempts: 1, class: resilience.ClassPermanent},
		{name: "408 by default", status: 408, attempts: 1, class: resilience.ClassPermanent},
		{name: "503 by default", status: 503, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "502 by default", status: 502, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "504 by default", status: 504, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "429 by default", status: 429, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "500 by default", status: 500, attempts: 1, class: resilience.ClassTerminal, failure: true},
		{name: "408 transient", opts: []httpclient.Option{httpclient.ClassifyStatus(408, resilience.ClassTransient)},
			status: 408, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "500 transient", opts: []httpclient.Option{httpclient.ClassifyStatus(500, resilience.ClassTransient)},
			status: 500, attempts: 4, class: resilience.ClassTransient, failure: true},
		{name: "503 permanent", opts: []httpclient.Option{httpclient.ClassifyStatus(503, resilience.ClassPermanent)},
			status: 503, attempts: 1, class: resilience.ClassPermanent},
		{name: "404 terminal", opts: []httpclient.Option{httpclient.ClassifyStatus(404, resilience.ClassTerminal)},
			status: 404, attempts: 1, class: resilience.ClassTerminal, failure: true},
		{name: "499 canceled", opts: []httpclient.Option{httpclient.ClassifyStatus(499, resilience.ClassCanceled)},
			status: 499, attempts: 1, class: resilience.ClassCanceled},
		{name: "404 success", opts: []httpclient.Option{httpclient.ClassifyStatus(404, resilience.ClassSuccess)},
			status: 404, attempts: 1, class: resilience.ClassPermanent, succeeds: true},
		{name: "the later call wins", opts: []httpclient.Option{
			httpclient.ClassifyStatus(404, resilience.ClassTransient), httpclient.ClassifyStatus(404, resilience.ClassTerminal)},
			status: 404, attempts: 1, class: resilience.ClassTerminal, failure: true},
		{name: "others keep their defaults", opts: []httpclient.Option{httpclient.ClassifyStatus(404, resilience.ClassTransient)},
			status: 503, attempts: 4, class: resilience.ClassTransient, failure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(tc.status)
			}))
			b := breaker.New("dep", breaker.ConsecutiveFailures(0))
			var callErrs []error // of each pipeline call, nil on success
			listener := resilience.ListenerFunc(func(ev resilience.Event) {
				if ev.Kind == resilience.EventCallDone {
					callErrs = append(callErrs, ev.Err)
				}
			})
			opts := append(tc.opts, fastRetry(pipeline.WithBreaker(b), pipeline.WithListener(listener)))
			err := httpclient.New(opts...).GetJSON(t.Context(), srv.URL, nil)
			var se *httpclient.StatusError
			require.ErrorAs(t, err, &se, "the Client fails a status outside 2xx")
			assert.Equal(t, tc.status, se.StatusCode)
			assert.Equal(t, tc.class, resilience.Classify(err))
			assert.Equal(t, tc.attempts, calls.Load(), "attempts")
			assert.Equal(t, tc.failure, b.Counts().TotalFailures > 0, "a breaker failure")
			require.Len(t, callErrs, 1)
			assert.Equal(t, tc.succeeds, callErrs[0] == nil, "the pipeline's call succeeds: %v", callErrs[0])

			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			resp, err := httpclient.NewTransport(opts...).RoundTrip(req)
			require.NoError(t, err, "a RoundTripper hands back the answer, whatever its class")
			resp.Body.Close()
			assert.Equal(t, tc.status, resp.StatusCode)
		})
	}
}
