package retrysignal_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Status's doc: "500 when the request this service made was at fault".
// httpclient marks the errors the client made itself (an unsupported
// scheme, no host) as resilience.ClassRejected; grpcclient answers the
// analogue with 500. Status answers 503 for it, "the dependency is down",
// which the caller retries and counts against this service although
// every retry meets the same error.
func TestReview102_StatusOfTheClientsOwnErrorIs500(t *testing.T) {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))),
		pipeline.WithBreaker(breaker.New("dep")))
	c := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	for _, u := range []string{"ftp://127.0.0.1:1/orders", "http:///orders"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		_, err := c.Do(req)
		if err == nil {
			t.Fatalf("%s: no error", u)
		}
		if got := resilience.Classify(err); got != resilience.ClassRejected {
			t.Fatalf("%s: class %v, want rejected: %v", u, got, err)
		}
		if got := retrysignal.Status(err); got != http.StatusInternalServerError {
			t.Errorf("%s: Status = %d, want 500 (the request this service made was at fault): %v", u, got, err)
		}
	}
}

// The same for a certificate the client does not trust: a failure no
// retry fixes (502 by the doc), answered 503 without the signal, so the
// caller retries it.
func TestReview102_StatusOfUntrustedCertificateIsNotRetriedAbove(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))
	c := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(&http.Transport{TLSClientConfig: &tls.Config{}}))}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err := c.Do(req)
	if resilience.Classify(err) != resilience.ClassRejected {
		t.Skipf("class %v: %v", resilience.Classify(err), err)
	}
	st := retrysignal.Status(err)
	if st == http.StatusServiceUnavailable && !retrysignal.Retried(err) {
		t.Errorf("Status = 503 without the signal for an error no retry fixes: the caller retries it: %v", err)
	}
}

// typedNil is an error whose Unwrap dereferences a nil receiver.
type typedNil struct{ err error }

func (e *typedNil) Error() string { return "typed nil" }
func (e *typedNil) Unwrap() error { return e.err }

// The pipeline returns an error whose methods panic as they are asked
// ("is returned"); retrysignal.Handler, the consumer of that error, must
// answer it rather than panic into net/http (which resets the connection:
// the caller sees no answer and retries).
func TestReview102_HandlerAnswersAnErrorWhoseUnwrapPanics(t *testing.T) {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		_, err := pipeline.Do(r.Context(), p, func(context.Context) (int, error) {
			var e *typedNil
			return 0, e
		})
		return err
	})
	rec := httptest.NewRecorder()
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	if panicked != nil {
		t.Fatalf("Handler panicked on the pipeline's error: %v", panicked)
	}
	if rec.Code < 500 {
		t.Errorf("status %d", rec.Code)
	}
}

func TestReview102_ProxyErrorHandlerErrorWhosePanics(t *testing.T) {
	var e *typedNil
	rec := httptest.NewRecorder()
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		retrysignal.ProxyErrorHandler(rec, httptest.NewRequest(http.MethodGet, "/", nil), errors.Join(e))
	}()
	if panicked != nil {
		t.Fatalf("ProxyErrorHandler panicked: %v", panicked)
	}
}
