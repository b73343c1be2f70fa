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
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r80Cutter cuts the first cutN attempts with a write ECONNRESET after
// reading 32 KiB, then answers with the sha256 of the body.
type r80Cutter struct {
	cutN     int32
	attempts atomic.Int32
}

func (c *r80Cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	n := c.attempts.Add(1)
	if n <= c.cutN {
		_, _ = io.CopyN(io.Discard, r.Body, 32<<10)
		r.Body.Close()
		return nil, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	}
	h := sha256.New()
	_, err := io.Copy(h, r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(hex.EncodeToString(h.Sum(nil)))), Header: http.Header{}, Request: r}, nil
}

func r80FakeDo(tr http.RoundTripper, ctx context.Context, body io.ReadCloser) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://r80.invalid/x", body)
	req.ContentLength = -1
	return tr.RoundTrip(req)
}

func TestReview80FakeCutFitsRetried(t *testing.T) {
	r80Leak(t)
	for _, size := range []int{40 << 10, 1<<20 - 1, 1 << 20} {
		c := &r80Cutter{cutN: 1}
		body := newR80Body(size)
		tr := httpclient.NewTransport(httpclient.Base(c), httpclient.MaxBufferedBody(1<<20), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)))))
		resp, err := r80FakeDo(tr, context.Background(), body)
		r80Sent(t, fmt.Sprintf("size %d", size), resp, err, body)
		if c.attempts.Load() != 2 {
			t.Errorf("size %d: attempts %d", size, c.attempts.Load())
		}
	}
}

func TestReview80FakeOversizedOnceNotCounted(t *testing.T) {
	r80Leak(t)
	c := &r80Cutter{cutN: 1 << 30}
	br := breaker.New("r80f", breaker.ConsecutiveFailures(1))
	tr := httpclient.NewTransport(httpclient.Base(c), httpclient.MaxBufferedBody(1<<20), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)), pipeline.WithBreaker(br))))
	for i := 0; i < 5; i++ {
		body := newR80Body(1<<20 + 1)
		before := c.attempts.Load()
		_, err := r80FakeDo(tr, context.Background(), body)
		if errors.Is(err, breaker.ErrOpen) || c.attempts.Load()-before != 1 || resilience.Classify(err) != resilience.ClassRejected {
			t.Errorf("%d: err %v class %v attempts %d", i, err, resilience.Classify(err), c.attempts.Load()-before)
		}
		if body.closes.Load() != 1 {
			t.Errorf("closes %d", body.closes.Load())
		}
	}
}

func TestReview80FakeBlockingAndErrorAndSlow(t *testing.T) {
	r80Leak(t)
	cases := []struct {
		name string
		mk   func() *r80Body
	}{
		{"block", func() *r80Body { b := newR80Body(100 << 10); b.block = true; return b }},
		{"error", func() *r80Body { b := newR80Body(100 << 10); b.fail = errors.New("r80 boom"); return b }},
		{"slow", func() *r80Body {
			b := newR80Body(200 << 10)
			b.slowAt = 40 << 10
			b.slow = 5 * time.Millisecond
			return b
		}},
	}
	for _, tc := range cases {
		c := &r80Cutter{cutN: 1}
		br := breaker.New("r80g", breaker.ConsecutiveFailures(1))
		tr := httpclient.NewTransport(httpclient.Base(c), httpclient.MaxBufferedBody(8<<20), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(3)), pipeline.WithBreaker(br))))
		body := tc.mk()
		start := time.Now()
		_, err := r80FakeDo(tr, context.Background(), body)
		el := time.Since(start)
		t.Logf("%s: took %v attempts %d class %v err %v", tc.name, el, c.attempts.Load(), resilience.Classify(err), err)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		if el > 500*time.Millisecond {
			t.Errorf("%s: took %v", tc.name, el)
		}
		if br.State() != resilience.StateClosed {
			t.Errorf("%s: breaker %v", tc.name, br.State())
		}
		if c.attempts.Load() != 1 {
			t.Errorf("%s: %d attempts", tc.name, c.attempts.Load())
		}
		time.Sleep(20 * time.Millisecond)
		if body.closes.Load() != 1 {
			t.Errorf("%s: closes %d", tc.name, body.closes.Load())
		}
	}
}

func TestReview80FakeHedge(t *testing.T) {
	r80Leak(t)
	for _, d := range []time.Duration{time.Microsecond, time.Millisecond, 10 * time.Millisecond} {
		for _, slow := range []bool{false, true} {
			c := &r80Cutter{cutN: 1}
			tr := httpclient.NewTransport(httpclient.Base(c), httpclient.MaxBufferedBody(8<<20),
				httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r80Retry(4)), pipeline.WithHedging(hedge.New(hedge.Delay(d))))))
			body := newR80Body(300 << 10)
			if slow {
				body.slowAt, body.slow = 40<<10, time.Millisecond
			}
			resp, err := r80FakeDo(tr, context.Background(), body)
			if slow && err == nil {
				// A hedge the timer sent late, once the read ahead (which
				// goes on after DrainTimeout) had the whole body.
				r80Sent(t, fmt.Sprintf("d %v slow", d), resp, err, body)
			} else if slow {
				// Read for longer than DrainTimeout after the cut: sent
				// once, and the cut is the server refusing it.
				if resilience.Classify(err) != resilience.ClassRejected {
					t.Errorf("d %v slow: %v (%v), want the cut, rejected", d, err, resilience.Classify(err))
				}
				time.Sleep(20 * time.Millisecond)
				if body.closes.Load() != 1 {
					t.Errorf("closes %d", body.closes.Load())
				}
			} else {
				r80Sent(t, fmt.Sprintf("d %v", d), resp, err, body)
			}
		}
	}
}
