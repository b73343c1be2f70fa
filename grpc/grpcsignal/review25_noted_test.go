package grpcsignal_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r25Stream records the trailer a handler's interceptor sets.
type r25Stream struct {
	grpc.ServerTransportStream
	mu sync.Mutex
	md metadata.MD
}

func (s *r25Stream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.md = metadata.Join(s.md, md)
	return nil
}
func (s *r25Stream) Method() string { return "/svc/M" }

func r25Client() *http.Client {
	p := pipeline.New(
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3))),
	)
	return &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
}

// A handler whose resilient call to a cache gave up on 503s falls back
// (the call's failure is handled, not returned); it then fails of its own,
// with a status error of its own (a database it reached with no retries).
// The doc: "other errors, such as the handler's own status errors, or one
// attempt nobody retried, pass as they are". The note of the fallen-back
// call marks the handler's own, unrelated error as "don't retry": the
// caller is told not to retry a failure nobody below retried.
func TestReview25_NotedFallbackMarksHandlersOwnError(t *testing.T) {
	cache := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer cache.Close()
	client := r25Client()

	handler := func(ctx context.Context, req any) (any, error) {
		// Optional cache lookup: its failure is handled by falling back.
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, cache.URL+"/item", nil)
		require.NoError(t, err)
		if resp, err := client.Do(r); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		// The handler's own failure (e.g. a DB with no retry below): its
		// caller should retry it, as without the toolkit.
		return nil, status.Error(codes.Unavailable, "db: connection reset")
	}

	st := &r25Stream{}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
	_, err := grpcsignal.UnaryServerInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, handler)
	require.Error(t, err)
	s := status.Convert(err)
	assert.Equal(t, "db: connection reset", s.Message(), "the handler's own status error must pass as it is")
	assert.Empty(t, st.md.Get(grpcsignal.PushbackKey), "no don't-retry pushback for a failure nobody below retried")
}

// The same for retrysignal.Handler (HTTP): a plain http.Client's error
// after a fallen-back resilient call is answered with No-Retry.
func TestReview25_NotedFallbackMarksPlainClientError(t *testing.T) {
	cache := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer cache.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused: a plain client's error
	client := r25Client()
	plain := &http.Client{}

	h := retrysignalHandler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, cache.URL+"/item", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		req2, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, deadURL+"/db", nil)
		resp, err := plain.Do(req2)
		if err == nil {
			resp.Body.Close()
			return errors.New("unexpected answer")
		}
		return err
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Empty(t, rec.Header().Get("No-Retry"), "a plain client's error is answered without the signal (retrysignal.Handler doc)")
}

func retrysignalHandler(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return retrysignal.Handler(f)
}

// Do no harm, end to end: the caller A (httpclient, 3 attempts) of B, whose
// optional cache is down (a resilient call, handled by falling back) and
// whose DB (a plain client, no retry) fails once. Without the toolkit's
// signal A's retry completes the request; with it, A gives up.
func TestReview25_NotedFallbackFailsCallerThatWouldComplete(t *testing.T) {
	for _, cacheStatus := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(cacheStatus), func(t *testing.T) { r25Chain(t, cacheStatus) })
	}
}

// r25Chain: the cache answers cacheStatus (200: the control, no note).
func r25Chain(t *testing.T, cacheStatus int) {
	cache := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(cacheStatus)
	}))
	defer cache.Close()
	var mu sync.Mutex
	dbCalls := 0
	db := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		dbCalls++
		n := dbCalls
		mu.Unlock()
		if n == 1 {
			http.Error(w, "blip", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "row")
	}))
	defer db.Close()
	client := r25Client()
	plain := &http.Client{}
	b := httptest.NewServer(retrysignalHandler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, cache.URL+"/item", nil)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		req2, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, db.URL+"/row", nil)
		resp, err := plain.Do(req2)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return &httpStatusErr{resp.StatusCode}
		}
		_, err = io.Copy(w, resp.Body)
		return err
	}))
	defer b.Close()

	a := r25Client()
	resp, err := a.Get(b.URL + "/x")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a plain chain completes on A's retry (No-Retry=%q)", resp.Header.Get("No-Retry"))
}

type httpStatusErr struct{ code int }

func (e *httpStatusErr) Error() string   { return http.StatusText(e.code) }
func (e *httpStatusErr) HTTPStatus() int { return e.code }
