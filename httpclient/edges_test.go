package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// bigError answers 503 with a body of n bytes to every request.
func bigError(n int, calls *atomic.Int64) http.Handler {
	body := strings.Repeat("e", n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, body)
	})
}

// TestBigErrorBodiesAreDrainedSoTheConnectionIsReused: four tries of a
// 503 with a 100 KiB body go over one TCP connection, and the caller gets
// the last answer whole.
func TestBigErrorBodiesAreDrainedSoTheConnectionIsReused(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, bigError(100<<10, &calls))
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	var conns, reused atomic.Int64
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		conns.Add(1)
		if i.Reused {
			reused.Add(1)
		}
	}}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), fastRetry())}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, srv.URL, nil)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.EqualValues(t, 4, calls.Load())
	assert.EqualValues(t, 4, conns.Load())
	assert.EqualValues(t, 3, reused.Load(), "one TCP connection for the four tries")
	assert.Len(t, body, 100<<10, "the last answer's body comes whole")
	assert.EqualValues(t, 100<<10, resp.ContentLength)
}

// TestFinalErrorResponseIsUntouchedAndNotWaitedFor: a 404 whose body is
// slow comes back as soon as its headers do, and a 1 MiB body whole.
func TestFinalErrorResponseIsUntouchedAndNotWaitedFor(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "gone")
	}))
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry())}
	start := time.Now()
	resp, err := hc.Get(srv.URL)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "the headers are not held back for the body")
	close(release)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "gone", string(body))

	var calls atomic.Int64
	big := newServer(t, bigError(1<<20, &calls))
	resp, err = hc.Get(big.URL)
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Len(t, body, 1<<20, "the body is not cut")
	assert.EqualValues(t, 1<<20, resp.ContentLength)
}

// TestCallerCancellationSurfaces: canceled during a backoff, the caller
// gets its context's error, not the previous 503.
func TestCallerCancellationSurfaces(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, bigError(10, &calls))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Hour), retrypolicy.Jitter(retrypolicy.None)))))),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel) // during the first backoff
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := hc.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, context.Canceled, "as net/http reports a canceled request")
	assert.Nil(t, resp)
	assert.EqualValues(t, 1, calls.Load())
}

// onceReader hides a reader's type, so that http.NewRequest gives the
// request no GetBody.
type onceReader struct{ io.Reader }

func TestBodyWithoutGetBodyIsBufferedAndRetried(t *testing.T) {
	f := &flaky{failures: 2}
	srv := newServer(t, f)
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry())}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, onceReader{strings.NewReader(`{"qty":2}`)})
	require.Nil(t, req.GetBody)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{`{"qty":2}`, `{"qty":2}`, `{"qty":2}`}, f.bodies, "the same body on every attempt")
}

func TestBodyTooLongToBufferSaysSo(t *testing.T) {
	var calls atomic.Int64
	var got sync.Map
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(calls.Add(1), len(b))
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	var events []string
	var mu sync.Mutex
	rec := resilience.ListenerFunc(func(e resilience.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e.Kind.String())
	})
	p := pipeline.New(pipeline.WithListener(rec), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.MaxBufferedBody(1000))}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, onceReader{strings.NewReader(strings.Repeat("b", 5000))})
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.EqualValues(t, 1, calls.Load(), "sent once")
	n, _ := got.Load(int64(1))
	assert.Equal(t, 5000, n, "whole")
	assert.Contains(t, events, "not_retried", "and an event says it was not retried")

	// A refused connection read none of the body: kept whole (nothing),
	// it is retried.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPut, "http://127.0.0.1:1/", onceReader{strings.NewReader(strings.Repeat("b", 5000))})
	_, err = hc.Do(req)
	require.Error(t, err)
	assert.NotErrorIs(t, err, httpclient.ErrBodyNotRetried)
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	assert.Greater(t, re.Attempts, 1)
}

func TestClientFollowsRedirectsAndKeepsCookies(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s1"})
		http.Redirect(w, r, "/new", http.StatusFound)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		if err != nil {
			http.Error(w, "no session", http.StatusUnauthorized)
			return
		}
		_, _ = fmt.Fprintf(w, `{"session":%q}`, c.Value)
	})
	srv := newServer(t, mux)
	jar, _ := cookiejar.New(nil)
	var out struct{ Session string }
	require.NoError(t, httpclient.New(httpclient.WithJar(jar)).GetJSON(t.Context(), srv.URL+"/old", &out))
	assert.Equal(t, "s1", out.Session)

	noFollow := httpclient.New(httpclient.CheckRedirect(func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }))
	err := noFollow.GetJSON(t.Context(), srv.URL+"/old", &out)
	var se *httpclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusFound, se.StatusCode)
}

// TestBreakerPerHost: host A is dead and B healthy, through one transport:
// A's breaker opens, B's calls all succeed.
func TestBreakerPerHost(t *testing.T) {
	var aCalls, bCalls atomic.Int64
	a := newServer(t, bigError(10, &aCalls))
	b := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bCalls.Add(1)
		_, _ = io.WriteString(w, `{}`)
	}))
	shared := breaker.New("shared", breaker.ConsecutiveFailures(1))
	breakers := sync.Map{}
	c := httpclient.New(fastRetry(pipeline.WithBreaker(shared)),
		httpclient.BreakerPerHost(func(authority string) *breaker.Breaker {
			br := breaker.New(authority, breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Minute))
			breakers.Store(authority, br)
			return br
		}))
	for range 5 {
		_ = c.GetJSON(t.Context(), a.URL, nil)
		require.NoError(t, c.GetJSON(t.Context(), b.URL, nil), "B is not failed by A")
	}
	require.ErrorIs(t, c.GetJSON(t.Context(), a.URL, nil), breaker.ErrOpen)
	assert.EqualValues(t, 2, aCalls.Load()/4, "A saw two calls of four attempts, then its breaker opened")
	assert.EqualValues(t, 5, bCalls.Load())
	aBreaker, _ := breakers.Load("http://" + strings.TrimPrefix(a.URL, "http://"))
	require.NotNil(t, aBreaker)
	assert.Equal(t, resilience.StateOpen, aBreaker.(*breaker.Breaker).State())
	assert.Equal(t, resilience.StateClosed, shared.State(), "the pipeline's own breaker is not used")
}

func TestBreakerPerHostIsBounded(t *testing.T) {
	var made atomic.Int64
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); _, _ = io.WriteString(w, `{}`) }))
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1")
	c := httpclient.New(httpclient.MaxBreakers(2), httpclient.BreakerPerHost(func(string) *breaker.Breaker {
		made.Add(1)
		return breaker.New("host")
	}))
	for _, host := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "localhost"} {
		_ = c.GetJSON(t.Context(), "http://"+host+port, nil)
	}
	assert.EqualValues(t, 2, made.Load())
}

func TestZeroTransportAndClientWork(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"ok":true}`) }))
	resp, err := (&http.Client{Transport: &httpclient.Transport{}}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	var out struct{ OK bool }
	require.NoError(t, new(httpclient.Client).GetJSON(t.Context(), srv.URL, &out))
	assert.True(t, out.OK)
}

// TestStreamedBodyWithOnlyTheCallersDeadline: a body sent in two flushed
// parts is read whole through a retrying transport under the caller's
// deadline.
func TestStreamedBodyWithOnlyTheCallersDeadline(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part one, ")
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(w, "part two")
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for name, p := range map[string]*pipeline.Pipeline{
		"retry":                   pipeline.New(pipeline.WithRetry(retrypolicy.New())),
		"retry, attempt timeout":  pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithAttemptTimeout(5*time.Second)),
		"breaker and time budget": pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithBreaker(breaker.New("x")), pipeline.WithTimeBudget(5*time.Second)),
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := (&http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}).Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, "part one, part two", string(body))
		})
	}
}

// countingBody counts its Close calls.
type countingBody struct {
	io.Reader
	closes atomic.Int64
}

func (b *countingBody) Close() error { b.closes.Add(1); return nil }

func TestTheCallersBodyIsClosed(t *testing.T) {
	f := &flaky{failures: 1}
	srv := newServer(t, f)
	for name, getBody := range map[string]bool{"with GetBody": true, "without": false} {
		t.Run(name, func(t *testing.T) {
			body := &countingBody{Reader: strings.NewReader("{}")}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, body)
			if getBody {
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("{}")), nil }
			}
			resp, err := httpclient.NewTransport(fastRetry()).RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.EqualValues(t, 1, body.closes.Load())
		})
	}
}

// TestSlowTransientBodyOfTheLastAnswerIsNotWaitedFor: a 503 whose body is
// slow, on a request that is not retried, comes back with its headers.
func TestSlowTransientBodyOfTheLastAnswerIsNotWaitedFor(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "busy")
	}))
	defer close(release)
	start := time.Now()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}")) // no key: one attempt
	resp, err := httpclient.NewTransport(fastRetry()).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Less(t, time.Since(start), time.Second)
}

// TestErrorBodyOfExactlyDrainLimitIsReused: a chunked 503 body of exactly
// DrainLimit bytes is read to its end, so the connection is reused. The
// end of the body (its last, empty chunk) comes a moment after its bytes,
// so that reading the DrainLimit bytes alone does not see it: a drain
// that stops at DrainLimit closes the connection.
func TestErrorBodyOfExactlyDrainLimitIsReused(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable) // no Content-Length: chunked
		_, _ = io.WriteString(w, strings.Repeat("e", httpclient.DrainLimit))
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // then the last chunk
	}))
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	var reused atomic.Int64
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Add(1)
		}
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, srv.URL, nil)
	resp, err := httpclient.NewTransport(httpclient.Base(base), fastRetry()).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.EqualValues(t, 4, calls.Load())
	assert.EqualValues(t, 3, reused.Load())
}

func TestBreakerPerHostBoundHoldsUnderConcurrency(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{}`) }))
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1")
	var made atomic.Int64
	c := httpclient.New(httpclient.MaxBreakers(2), httpclient.BreakerPerHost(func(string) *breaker.Breaker {
		made.Add(1)
		time.Sleep(10 * time.Millisecond) // a breaker on a shared store takes a while
		return breaker.New("host")
	}))
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() { _ = c.GetJSON(t.Context(), fmt.Sprintf("http://127.0.0.%d%s", i%16+1, port), nil) })
	}
	wg.Wait()
	assert.EqualValues(t, 2, made.Load())
}

func TestBodyNotRetriedErrorOnlyWhenTheBodyWasWhy(t *testing.T) {
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry(), httpclient.MaxBufferedBody(10))}
	long := func() io.Reader { return onceReader{strings.NewReader(strings.Repeat("b", 100))} }
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", long()) // POST without key: never retried
	_, err := hc.Do(req)
	require.Error(t, err)
	assert.NotErrorIs(t, err, httpclient.ErrBodyNotRetried)

	// A PUT would be retried, but a server that read its body (more than
	// could be kept) and then failed leaves it sent once.
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler) // the connection cut: no answer
	}))
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, long())
	_, err = hc.Do(req)
	require.ErrorIs(t, err, httpclient.ErrBodyNotRetried)
}

// TestUpgradeKeepsTheConnectionWritable: a 101 Switching Protocols body is
// the upgraded connection, readable and writable.
func TestUpgradeKeepsTheConnectionWritable(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = rw.WriteString(line)
		_ = rw.Flush()
	}))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := httpclient.NewTransport(fastRetry()).RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rw, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the upgraded connection is writable")
	defer rw.Close()
	_, err = io.WriteString(rw, "ping\n")
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(rw, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping\n", string(buf))
}
