package httpclient_test

// review170: calls that must still complete, and bodies closed once.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r170Gated is a stream body: it gives its parts, each after its delay.
func r170Gated(t *testing.T, parts []string, delays []time.Duration) io.ReadCloser {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() {
		for i, p := range parts {
			time.Sleep(delays[i])
			if _, err := pw.Write([]byte(p)); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// A stream (PUT, ContentLength -1) whose first attempt times out (the
// attempt timeout) while the stream waits for its next part: the doc
// says "the retry sends what was kept, then the rest as it is read". The
// stream's next part comes 400 ms later; the budget is 3 s.
func TestReview170StreamRetryAfterAttemptTimeoutWhileStreamWaits(t *testing.T) {
	var n atomic.Int32
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select { // the first attempt hangs (bounded: a handler that has not read its body may not hear its client leave)
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	p := pipeline.New(pipeline.WithTimeBudget(3*time.Second), pipeline.WithAttemptTimeout(150*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(10*time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	req, _ := http.NewRequest(http.MethodPut, srv, r170Gated(t, []string{"hello", "world"}, []time.Duration{0, 400 * time.Millisecond}))
	req.ContentLength = -1
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("the retry was not sent (attempts seen %d): %v", n.Load(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "helloworld" {
		t.Fatalf("body %q", b)
	}
}

// A stream whose hedge falls due while the stream still gives its parts:
// the hedge cannot send it, but the first attempt, which the server
// answers once it has read it all, must still complete the call.
func TestReview170HedgeOfStreamStillCompletes(t *testing.T) {
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	p := pipeline.New(pipeline.WithTimeBudget(3*time.Second), pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	req, _ := http.NewRequest(http.MethodPut, srv, r170Gated(t, []string{"abc", "def"}, []time.Duration{0, 250 * time.Millisecond}))
	req.ContentLength = -1
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("a hedge that could not send the stream failed the call: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "abcdef" {
		t.Fatalf("body %q", b)
	}
}

// A GetBody body, hedged: the first attempt is slow, the hedge wins, and
// the body the server sees is whole.
func TestReview170HedgeWithGetBody(t *testing.T) {
	var n atomic.Int32
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			return
		}
		w.Write(b)
	})
	p := pipeline.New(pipeline.WithTimeBudget(3*time.Second), pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	body := strings.Repeat("z", 100<<10)
	req, _ := http.NewRequest(http.MethodPut, srv, strings.NewReader(body))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != body {
		t.Fatalf("body of %d bytes", len(b))
	}
}

// r170Blocking is a body that gives head, then blocks until closed; Close
// is the common "close(done)" that unblocks a Read: a second Close would
// panic, so it counts them instead.
type r170Blocking struct {
	head   []byte
	done   chan struct{}
	once   sync.Once
	closes atomic.Int32
}

func newR170Blocking(head string) *r170Blocking {
	return &r170Blocking{head: []byte(head), done: make(chan struct{})}
}

func (b *r170Blocking) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	<-b.done
	return 0, errors.New("r170: body closed")
}

func (b *r170Blocking) Close() error {
	b.closes.Add(1)
	b.once.Do(func() { close(b.done) })
	return nil
}

// A stalled body is closed once, as net/http closes a body once: a body
// whose Close is close(done) panics on a second Close (io.Closer leaves
// it undefined), here on the caller's goroutine or on net/http's writer.
func TestReview170StalledBodyClosedOnce(t *testing.T) {
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	for _, tc := range []struct {
		name, method string
		length       int64
		key          bool
	}{
		{"known-length-read-into-memory", http.MethodPut, 100, false},
		{"unknown-length-POST-once", http.MethodPost, 0, false},
		{"unknown-length-PUT-stream", http.MethodPut, -1, false},
		{"over-MaxBufferedBody", http.MethodPut, 2 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := &http.Client{Transport: httpclient.NewTransport()}
			body := newR170Blocking("0123456789")
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tc.method, srv, body)
			req.ContentLength = tc.length
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("a stalled body completed?")
			}
			deadline := time.Now().Add(time.Second)
			for body.closes.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // any later Close
			if c := body.closes.Load(); c != 1 {
				t.Errorf("the caller's body was closed %d times (a Close of close(done) panics on the second)", c)
			}
		})
	}
}

// A stalled body leaves no goroutine behind once its call failed.
func TestReview170StalledBodyNoLeak(t *testing.T) {
	srv := newR170Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	tr := httpclient.NewTransport()
	hc := &http.Client{Transport: tr}
	before := runtime.NumGoroutine()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv, newR170Blocking("abc"))
		resp, err := hc.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
		}
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		tr.CloseIdleConnections()
	}
	if g := runtime.NumGoroutine(); g > before+1 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines, %d before:\n%s", g, before, buf[:runtime.Stack(buf, true)])
	}
}

var _ = bytes.NewReader
