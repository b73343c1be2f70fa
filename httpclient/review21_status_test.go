package httpclient_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review21RawServer answers every request on every connection with raw,
// whatever it is, and counts the requests.
func review21RawServer(t *testing.T, raw string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					n.Add(1)
					if _, err := io.WriteString(c, raw); err != nil {
						return
					}
				}
			}(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String(), &n
}

// review21Hop is a service as examples/chain builds one: it calls next
// through a resilient Client and answers a failure with the signal
// (retrysignal.Handler).
func review21Hop(next string) http.Handler {
	client := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
	)))
	h := func(w http.ResponseWriter, r *http.Request) error {
		var out struct{ Stock int }
		if err := client.GetJSON(r.Context(), next, &out); err != nil {
			return err
		}
		_, _ = io.WriteString(w, `{"stock":1}`)
		return nil
	}
	return deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(h)))
}

// A downstream that answers with a status line the Go client accepts but
// that is not a valid status to write ("000", "099"): the hop's
// retrysignal.Handler (WriteError with Status(err) = the dependency's own
// status) panics in net/http's WriteHeader, and the caller gets no answer
// at all, neither a 5xx nor the signal.
func TestReview21BogusDownstreamStatusCrashesWriteError(t *testing.T) {
	for _, code := range []string{"000", "099"} {
		t.Run(code, func(t *testing.T) {
			d, _ := review21RawServer(t, "HTTP/1.1 "+code+" Bogus\r\nContent-Length: 0\r\n\r\n")
			b := httptest.NewServer(review21Hop(d))
			defer b.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			require.NoError(t, err, "the hop must answer its caller (a 5xx with No-Retry), not crash on the dependency's status line")
			assert.GreaterOrEqual(t, resp.StatusCode, 500)
			assert.Equal(t, "1", resp.Header.Get(retrysignal.NoRetryHeader))
		})
	}
}

// A downstream answering 304 or 101 (statuses outside 2xx that the Client
// fails, but that are not failures): WriteError answers the hop's caller
// with that same status, which is no failure to the caller (to a cache, a
// 304 says "your copy is still good"; a 101 says the connection switched
// protocols). Status's promise is to keep the failure's meaning.
func TestReview21Downstream304IsPassedUpAsNotModified(t *testing.T) {
	for _, raw := range []string{"HTTP/1.1 304 Not Modified\r\n\r\n", "HTTP/1.1 101 Switching Protocols\r\n\r\n"} {
		t.Run(raw[9:12], func(t *testing.T) {
			d, _ := review21RawServer(t, raw)
			b := httptest.NewServer(review21Hop(d))
			defer b.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
			req.Header.Set("If-None-Match", `"v1"`)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			t.Logf("caller got %d, No-Retry %q", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader))
			assert.GreaterOrEqual(t, resp.StatusCode, 400, "the hop failed (its dependency did not answer 2xx): the caller must see a failure, not %d", resp.StatusCode)
		})
	}
}

// retrysignal.Handler answers every error its function returns with the
// signal, also one that did not come out of a resilient client (a plain
// http.Client's, the handler's own): nobody retried below, yet the caller
// is told not to retry, and a blip that the caller's retry would have
// ridden out fails the call. grpcsignal's interceptors only signal errors
// that carry a resilience class.
func TestReview21HandlerSignalsErrorsNobodyRetried(t *testing.T) {
	var cCalls atomic.Int64
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cCalls.Add(1) == 1 { // one blip
			http.Error(w, "blip", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer c.Close()
	b := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, c.URL, nil)
		resp, err := http.DefaultClient.Do(req) // a plain client: no retries
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New("c answered " + resp.Status)
		}
		_, _ = io.Copy(w, resp.Body)
		return nil
	}))
	defer b.Close()

	brk := breaker.New("b")
	a := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(brk),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
	)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out string
	err := a.GetJSON(ctx, b.URL, &out)
	t.Logf("C got %d requests; A's error: %v", cCalls.Load(), err)
	if err != nil {
		var se *httpclient.StatusError
		if errors.As(err, &se) {
			t.Logf("B answered %d, No-Retry %q", se.StatusCode, se.Header.Get(retrysignal.NoRetryHeader))
		}
	}
	// "ok" is not JSON: a decode error means B answered 200 (the retry worked).
	var se *httpclient.StatusError
	assert.False(t, errors.As(err, &se), "one blip, no retry anywhere below: A's retry should have ridden it out")
}
