package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// A caller that cancels with a cause (context.WithCancelCause,
// WithTimeoutCause): its own doing, never a failure of the dependency.
func TestReview113_CancelCauseNotCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	defer srv.Close()
	cause := errors.New("the user went away")
	cases := map[string]func() (context.Context, func()){
		"cancel cause": func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
			return ctx, func() { cancel(nil) }
		},
		"timeout cause": func() (context.Context, func()) {
			return context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
		},
		"deadline cause in mid-body": nil,
	}
	for name, mk := range cases {
		if mk == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := breaker.New("r113", breaker.ConsecutiveFailures(1))
			rt := httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(b)))
			for range 3 {
				ctx, cancel := mk()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := rt.RoundTrip(req)
				cancel()
				if resp != nil {
					resp.Body.Close()
				}
				if err == nil {
					t.Fatal("no error")
				}
				t.Logf("err: %v", err)
			}
			c := b.Counts()
			if c.TotalFailures != 0 || b.State() != 0 {
				t.Fatalf("the caller's cancellation with a cause counted against the dependency: %+v state %v", c, b.State())
			}
		})
	}
}

// Cancel with a cause as the caller reads the body.
func TestReview113_CancelCauseMidBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	b := breaker.New("r113", breaker.ConsecutiveFailures(1))
	rt := httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(b)))
	ctx, cancel := context.WithCancelCause(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(30*time.Millisecond, func() { cancel(errors.New("bye")) })
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("read err: %v", err)
	if c := b.Counts(); c.TotalFailures != 0 {
		t.Fatalf("counted: %+v", c)
	}
}
