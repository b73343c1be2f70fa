package httpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Each call's attempts and hedges carry one key, the header on each; keys
// differ between calls; a caller's key is kept.
func TestReview86KeysAcrossAttemptsAndHedges(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // call id -> keys
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Call")
		keys := r.Header.Values(idempotencykey.Header)
		k := strings.Join(keys, "|")
		mu.Lock()
		seen[id] = append(seen[id], k)
		cnt := len(seen[id])
		mu.Unlock()
		n.Add(1)
		switch cnt {
		case 1:
			time.Sleep(30 * time.Millisecond) // hedged
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 3:
			w.WriteHeader(http.StatusBadGateway)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(6), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))),
	)
	c := &http.Client{Transport: NewTransport(WithPipeline(p), AutoIdempotencyKey())}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('A'+i%26)) + strings.Repeat("x", i)
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, strings.NewReader("body"))
			req.Header.Set("X-Call", id)
			switch i % 4 {
			case 1:
				req.Header.Set(idempotencykey.Header, "caller-"+id)
			case 2:
				req.Header["idempotency-key"] = []string{"lower-" + id}
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	all := map[string]string{}
	for id, keys := range seen {
		if len(keys) < 3 {
			t.Errorf("call %s: only %d requests", id, len(keys))
		}
		for _, k := range keys {
			if k == "" || strings.Contains(k, "|") || k != keys[0] {
				t.Errorf("call %s: keys %q", id, keys)
				break
			}
		}
		if strings.HasPrefix(id, "B") || strings.HasPrefix(id, "F") {
		}
		if other, ok := all[keys[0]]; ok {
			t.Errorf("calls %s and %s share key %q", id, other, keys[0])
		}
		all[keys[0]] = id
	}
	for id, keys := range seen {
		_ = id
		if strings.HasPrefix(keys[0], "caller-") || strings.HasPrefix(keys[0], "lower-") {
			if !strings.HasSuffix(keys[0], id) {
				t.Errorf("caller key changed: %s %q", id, keys[0])
			}
		}
	}
	t.Logf("%d calls, %d requests", len(seen), n.Load())
}
