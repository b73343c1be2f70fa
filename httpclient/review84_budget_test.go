package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review84RT struct {
	mu   sync.Mutex
	hdrs []string
	took time.Duration
	fail int
}

func (f *review84RT) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.hdrs = append(f.hdrs, strings.Join(r.Header.Values(deadline.Header), ","))
	n := len(f.hdrs)
	f.mu.Unlock()
	select {
	case <-time.After(f.took):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	code := 200
	if n <= f.fail {
		code = 503
	}
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
}

// Each attempt sends what is left of the earliest of caller deadline, time
// budget and attempt timeout; a caller's own header is never forwarded.
func TestReview84_AttemptBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &review84RT{took: 100 * time.Millisecond, fail: 2}
		p := pipeline.New(pipeline.WithTimeBudget(time.Second), pipeline.WithAttemptTimeout(300*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.MaxDelay(50*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		c := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(rt), httpclient.WithPipeline(p))}
		req, _ := http.NewRequest("GET", "http://dep.example/", nil)
		req.Header.Set(deadline.Header, "5")
		req.Header["request-timeout-ms"] = []string{"6"}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("no caller deadline, budget 1s, attempt 300ms: headers %q", rt.hdrs)
		if len(rt.hdrs) != 3 || rt.hdrs[0] != "300" || rt.hdrs[1] != "300" || rt.hdrs[2] != "300" {
			t.Errorf("headers %q", rt.hdrs)
		}

		rt = &review84RT{took: 100 * time.Millisecond, fail: 5}
		c = &http.Client{Transport: httpclient.NewTransport(httpclient.Base(rt), httpclient.WithPipeline(p))}
		ctx, cancel := context.WithTimeout(context.Background(), 520*time.Millisecond)
		defer cancel()
		req, _ = http.NewRequestWithContext(ctx, "GET", "http://dep.example/", nil)
		resp, err = c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		t.Logf("caller 520ms: headers %q err %v", rt.hdrs, err)
		// attempts at 0, 150, 300, 450: left 520, 370, 220, 70 -> min(300, left)
		want := []string{"300", "300", "220", "70"}
		for i, w := range want {
			if i >= len(rt.hdrs) || rt.hdrs[i] != w {
				t.Errorf("attempt %d: got %q want %q", i+1, rt.hdrs, want)
				break
			}
		}
	})
}

// No deadline anywhere: no header sent, even if the caller set one.
func TestReview84_NoDeadlineNoHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &review84RT{}
		c := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(rt), httpclient.WithPipeline(pipeline.New()))}
		req, _ := http.NewRequest("GET", "http://dep.example/", nil)
		req.Header.Set(deadline.Header, "5")
		req.Header["REQUEST-TIMEOUT-MS"] = []string{"6"}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if rt.hdrs[0] != "" {
			t.Errorf("header forwarded: %q", rt.hdrs)
		}
		if req.Header.Get(deadline.Header) != "5" {
			t.Errorf("caller's request modified")
		}
	})
}
