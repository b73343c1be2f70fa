package httpclient_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r80Body is a body of unknown length: data, then (after data) it blocks
// until closed (block), or fails (fail), or ends.
type r80Body struct {
	mu              sync.Mutex
	data            []byte
	off             int
	block           bool
	fail            error
	closes          atomic.Int32
	closed          chan struct{}
	once            sync.Once
	slowAt          int           // after this many bytes, each Read waits slow
	slow            time.Duration // (0: none)
	readsAfterClose atomic.Int32
}

func newR80Body(n int) *r80Body {
	b := &r80Body{data: make([]byte, n), closed: make(chan struct{})}
	for i := range b.data {
		b.data[i] = byte(i*7 + i/251)
	}
	return b
}

func (b *r80Body) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		b.readsAfterClose.Add(1)
		return 0, errors.New("r80: read after close")
	default:
	}
	b.mu.Lock()
	off := b.off
	b.mu.Unlock()
	if b.slow > 0 && off >= b.slowAt {
		select {
		case <-time.After(b.slow):
		case <-b.closed:
			return 0, errors.New("r80: closed")
		}
	}
	b.mu.Lock()
	if b.off < len(b.data) {
		n := copy(p, b.data[b.off:])
		if b.slow > 0 && n > 4096 {
			n = 4096
			copy(p, b.data[b.off:b.off+n])
		}
		b.off += n
		b.mu.Unlock()
		return n, nil
	}
	b.mu.Unlock()
	if b.fail != nil {
		return 0, b.fail
	}
	if b.block {
		<-b.closed
		return 0, errors.New("r80: closed while blocked")
	}
	return 0, io.EOF
}

func (b *r80Body) Close() error {
	b.closes.Add(1)
	b.once.Do(func() { close(b.closed) })
	return nil
}

func (b *r80Body) sum() string { s := sha256.Sum256(b.data); return hex.EncodeToString(s[:]) }

// r80Server cuts the first cutN attempts (reads 32 KiB raw, then RST), then
// reads the body whole and answers 200 with its sha256.
type r80Server struct {
	*httptest.Server
	attempts atomic.Int32
	cutN     int32
	sums     chan string
}

func newR80Server(t *testing.T, cutN int32) *r80Server {
	s := &r80Server{cutN: cutN, sums: make(chan string, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.attempts.Add(1)
		if n <= s.cutN {
			conn, bufrw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_, _ = io.CopyN(io.Discard, bufrw, 32<<10)
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			conn.Close()
			return
		}
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			w.WriteHeader(500)
			return
		}
		sum := hex.EncodeToString(h.Sum(nil))
		s.sums <- sum
		_, _ = io.WriteString(w, sum)
	}))
	t.Cleanup(s.Close)
	return s
}

func r80Transport(opts ...httpclient.Option) *httpclient.Transport {
	base := &http.Transport{}
	return httpclient.NewTransport(append([]httpclient.Option{httpclient.Base(base)}, opts...)...)
}

func r80Retry(n int) *retrypolicy.Policy {
	return retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))
}

func r80Do(t *testing.T, tr http.RoundTripper, ctx context.Context, url string, body io.ReadCloser) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, body)
	req.ContentLength = -1 // unknown, chunked
	return tr.RoundTrip(req)
}

// r80Sent checks that the call succeeded with the server's sha256 of body,
// and that body was closed once (after a moment: the base may close it
// after RoundTrip returns).
func r80Sent(t *testing.T, what string, resp *http.Response, err error, body *r80Body) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v (class %v)", what, err, resilience.Classify(err))
	} else {
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != body.sum() {
			t.Errorf("%s: the server got other bytes", what)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if c := body.closes.Load(); c != 1 {
		t.Errorf("%s: body closed %d times", what, c)
	}
}

func r80Leak(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, opt)
	})
}

// A server that died mid-upload: the retry after a cut sends the body byte-exact.
func TestReview80CutRetriedByteExact(t *testing.T) {
	r80Leak(t)
	for _, size := range []int{256 << 10, 1 << 20} {
		s := newR80Server(t, 1)
		body := newR80Body(size)
		tr := r80Transport(httpclient.MaxBufferedBody(32<<20), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)))))
		resp, err := r80Do(t, tr, context.Background(), s.URL, body)
		r80Sent(t, fmt.Sprintf("size %d", size), resp, err, body)
		tr.CloseIdleConnections()
		if n := body.readsAfterClose.Load(); n != 0 {
			t.Errorf("size %d: %d reads after close", size, n)
		}
		t.Logf("size %d: attempts %d", size, s.attempts.Load())
	}
}

// Oversized bodies cut by the server: sent once, rejected, never open a
// ConsecutiveFailures(1) breaker.
func TestReview80OversizedCutsNeverOpenBreaker(t *testing.T) {
	r80Leak(t)
	s := newR80Server(t, 1000)
	br := breaker.New("r80", breaker.ConsecutiveFailures(1))
	tr := r80Transport(httpclient.MaxBufferedBody(1<<20),
		httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)), pipeline.WithBreaker(br))))
	for i := 0; i < 6; i++ {
		before := s.attempts.Load()
		body := newR80Body(16 << 20)
		_, err := r80Do(t, tr, context.Background(), s.URL, body)
		if err == nil {
			t.Fatalf("no error")
		}
		if errors.Is(err, breaker.ErrOpen) {
			t.Errorf("request %d: breaker open: %v", i, err)
		}
		if d := s.attempts.Load() - before; d != 1 {
			t.Errorf("request %d: %d attempts", i, d)
		}
		t.Logf("request %d: class %v err %v", i, resilience.Classify(err), err)
		time.Sleep(5 * time.Millisecond)
		if c := body.closes.Load(); c != 1 {
			t.Errorf("body closed %d times", c)
		}
	}
	if st := br.State(); st != resilience.StateClosed {
		t.Errorf("breaker %v", st)
	}
	tr.CloseIdleConnections()
}

// A body that blocks for good, or fails to read, after the cut: the
// request returns within about DrainTimeout, sent once (no part of the
// body sent again), rejected, and the breaker stays closed; the
// read-ahead goroutine ends.
func TestReview80BodyThatDoesNotEndAfterTheCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*r80Body)
	}{
		{"blocks", func(b *r80Body) { b.block = true }},
		{"fails", func(b *r80Body) { b.fail = errors.New("r80 caller boom") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r80Leak(t)
			s := newR80Server(t, 1000)
			br := breaker.New("r80b", breaker.ConsecutiveFailures(1))
			tr := r80Transport(httpclient.MaxBufferedBody(32<<20),
				httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)), pipeline.WithBreaker(br))))
			for i := 0; i < 4; i++ {
				body := newR80Body(8 << 20)
				tc.set(body)
				start := time.Now()
				before := s.attempts.Load()
				_, err := r80Do(t, tr, context.Background(), s.URL, body)
				el := time.Since(start)
				if err == nil {
					t.Fatal("no error")
				}
				att := s.attempts.Load() - before
				t.Logf("took %v class %v attempts %d err %v", el, resilience.Classify(err), att, err)
				if el > 2*time.Second {
					t.Errorf("took %v", el)
				}
				if att != 1 {
					t.Errorf("request %d: %d attempts (a partial body sent again)", i, att)
				}
				time.Sleep(10 * time.Millisecond)
				if c := body.closes.Load(); c != 1 {
					t.Errorf("closed %d times", c)
				}
			}
			if br.State() != resilience.StateClosed {
				t.Errorf("breaker %v", br.State())
			}
			tr.CloseIdleConnections()
		})
	}
}

// ctx canceled during the read-ahead (a slow body).
func TestReview80CancelDuringReadAhead(t *testing.T) {
	r80Leak(t)
	s := newR80Server(t, 1000)
	tr := r80Transport(httpclient.MaxBufferedBody(64<<20),
		httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)))))
	for i := 0; i < 3; i++ {
		body := newR80Body(8 << 20)
		body.block = true
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Duration(20+10*i) * time.Millisecond); cancel() }()
		start := time.Now()
		_, err := r80Do(t, tr, ctx, s.URL, body)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("took %v: %v, want context.Canceled", time.Since(start), err)
		}
		cancel()
		time.Sleep(5 * time.Millisecond)
		if c := body.closes.Load(); c != 1 {
			t.Errorf("closed %d", c)
		}
	}
	tr.CloseIdleConnections()
}

// A cut with hedging on: a body that fits is still delivered byte-exact.
func TestReview80CutWithHedging(t *testing.T) {
	r80Leak(t)
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
		s := newR80Server(t, 1)
		body := newR80Body(1 << 20)
		tr := r80Transport(httpclient.MaxBufferedBody(32<<20),
			httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(4)), pipeline.WithHedging(hedge.New(hedge.Delay(d))))))
		resp, err := r80Do(t, tr, context.Background(), s.URL, body)
		r80Sent(t, fmt.Sprintf("delay %v", d), resp, err, body)
		t.Logf("delay %v attempts %d", d, s.attempts.Load())
		tr.CloseIdleConnections()
	}
}

// Many concurrent cut requests, some fitting, some oversized, some blocking.
func TestReview80Concurrent(t *testing.T) {
	r80Leak(t)
	s := newR80Server(t, 0)
	var cut atomic.Int32
	s.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Cut") == "1" && cut.Add(1)%2 == 1 {
			conn, bufrw, _ := http.NewResponseController(w).Hijack()
			_, _ = io.CopyN(io.Discard, bufrw, 32<<10)
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
			return
		}
		h := sha256.New()
		io.Copy(h, r.Body)
		io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
	})
	tr := r80Transport(httpclient.MaxBufferedBody(4<<20), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(4)))))
	// A body that never ends, to a server that reads to the end, waits
	// for good, as it would without the Transport: the caller's deadline
	// ends it.
	var wg sync.WaitGroup
	var okN, failN atomic.Int32
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := newR80Body(1<<20 + i*1000)
			ctx := context.Background()
			if i%4 == 3 {
				body.block = true
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, s.URL, body)
			req.ContentLength = -1
			req.Header.Set("X-Cut", "1")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(got) != body.sum() {
					t.Errorf("%d: sha mismatch", i)
				}
				okN.Add(1)
			} else {
				failN.Add(1)
				if i%4 != 3 {
					t.Logf("%d: %v (%v)", i, err, resilience.Classify(err))
				}
			}
			time.Sleep(20 * time.Millisecond)
			if c := body.closes.Load(); c != 1 {
				t.Errorf("%d: closed %d", i, c)
			}
		}(i)
	}
	wg.Wait()
	t.Logf("ok %d fail %d", okN.Load(), failN.Load())
	tr.CloseIdleConnections()
}
