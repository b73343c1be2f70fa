package httpclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review51Hop is one service of a chain: it calls next through its own
// pipeline (retry + breaker) and answers its JSON, or the failure through
// retrysignal.Handler.
type review51Hop struct {
	srv    *httptest.Server
	br     *breaker.Breaker
	seen   atomic.Int64
	budget atomic.Int64 // last Request-Timeout-Ms seen, ms
	attHdr atomic.Value
}

type review51Opts struct {
	attempts    int
	budget      time.Duration // pipeline time budget; 0 none
	attemptTO   time.Duration
	h2          bool
	base        http.RoundTripper
	trust       func(*url.URL) bool
	consecutive uint32
	baseDelay   time.Duration
	maxDelay    time.Duration
}

func review51NewHop(t testing.TB, name, next string, o review51Opts) *review51Hop {
	h := &review51Hop{}
	if o.attempts == 0 {
		o.attempts = 3
	}
	if o.consecutive == 0 {
		o.consecutive = 5
	}
	if o.baseDelay == 0 {
		o.baseDelay = 2 * time.Millisecond
	}
	if o.maxDelay == 0 {
		o.maxDelay = 20 * time.Millisecond
	}
	h.br = breaker.New(name, breaker.ConsecutiveFailures(o.consecutive), breaker.OpenTimeout(time.Second))
	popts := []pipeline.Option{
		pipeline.WithBreaker(h.br),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(o.attempts), retrypolicy.BaseDelay(o.baseDelay), retrypolicy.MaxDelay(o.maxDelay))),
	}
	if o.budget > 0 {
		popts = append(popts, pipeline.WithTimeBudget(o.budget))
	}
	if o.attemptTO > 0 {
		popts = append(popts, pipeline.WithAttemptTimeout(o.attemptTO))
	}
	copts := []httpclient.Option{httpclient.WithPipeline(pipeline.New(popts...))}
	if o.base != nil {
		copts = append(copts, httpclient.Base(o.base))
	}
	if o.trust != nil {
		copts = append(copts, httpclient.TrustNoRetry(o.trust))
	}
	client := httpclient.New(copts...)
	handler := func(w http.ResponseWriter, r *http.Request) error {
		h.seen.Add(1)
		if dl, ok := r.Context().Deadline(); ok { // deadline.Middleware's, from the header it takes off
			h.budget.Store(int64((time.Until(dl) + time.Millisecond - 1) / time.Millisecond))
		}
		h.attHdr.Store(r.Header.Get(retrysignal.AttemptHeader))
		var out map[string]any
		if err := client.GetJSON(r.Context(), next, &out); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(out)
	}
	hh := deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(handler)))
	if o.h2 {
		h.srv = httptest.NewUnstartedServer(hh)
		h.srv.EnableHTTP2 = true
		h.srv.StartTLS()
	} else {
		h.srv = httptest.NewServer(hh)
	}
	t.Cleanup(h.srv.Close)
	return h
}

// review51Bottom is the dependency at the bottom: status decides its answer.
type review51Bottom struct {
	srv    *httptest.Server
	seen   atomic.Int64
	status atomic.Int64
	delay  atomic.Int64 // ns
	hdrs   sync.Map
}

func review51NewBottom(t testing.TB, h2 bool) *review51Bottom {
	b := &review51Bottom{}
	b.status.Store(200)
	hh := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.seen.Add(1)
		b.hdrs.Store(n, r.Header.Clone())
		if d := time.Duration(b.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		s := int(b.status.Load())
		if s != 200 {
			http.Error(w, "failing", s)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	if h2 {
		b.srv = httptest.NewUnstartedServer(hh)
		b.srv.EnableHTTP2 = true
		b.srv.StartTLS()
	} else {
		b.srv = httptest.NewServer(hh)
	}
	t.Cleanup(b.srv.Close)
	return b
}

// review51Chain builds top client -> A -> B -> C -> D.
func review51Chain(t testing.TB, h2 bool, o review51Opts) (hops [3]*review51Hop, d *review51Bottom) {
	d = review51NewBottom(t, h2)
	if h2 {
		o.h2 = true
		o.base = d.srv.Client().Transport // trusts the test certificate (all httptest servers share it)
	}
	next := d.srv.URL
	for i := 2; i >= 0; i-- {
		hops[i] = review51NewHop(t, fmt.Sprintf("hop%c", 'A'+i), next, o)
		next = hops[i].srv.URL
	}
	return hops, d
}

func review51Top(o review51Opts) *httpclient.Client {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))))
	opts := []httpclient.Option{httpclient.WithPipeline(p)}
	if o.base != nil {
		opts = append(opts, httpclient.Base(o.base))
	}
	return httpclient.New(opts...)
}

// Amplification: a failing bottom (503) seen through 3 hops each retrying 3 times.
func TestReview51_Amplification(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, status := range []int{503, 502, 504, 429, 500, 404} {
			t.Run(fmt.Sprintf("h2=%v/%d", h2, status), func(t *testing.T) {
				hops, d := review51Chain(t, h2, review51Opts{consecutive: 1000})
				d.status.Store(int64(status))
				o := review51Opts{}
				if h2 {
					o.base = d.srv.Client().Transport
				}
				top := review51Top(o)
				const calls = 10
				for range calls {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := top.GetJSON(ctx, hops[0].srv.URL, nil)
					cancel()
					var se *httpclient.StatusError
					if err == nil {
						t.Fatal("want failure")
					}
					if !errorsAs(err, &se) {
						t.Logf("top err %v", err)
					} else if se.StatusCode != status {
						t.Logf("top status %d want %d", se.StatusCode, status)
					}
				}
				t.Logf("per top call: A %.1f B %.1f C %.1f D %.1f", float64(hops[0].seen.Load())/calls, float64(hops[1].seen.Load())/calls, float64(hops[2].seen.Load())/calls, float64(d.seen.Load())/calls)
				want := int64(3 * calls)
				if status == 500 || status == 404 {
					want = calls
				}
				if d.seen.Load() != want || hops[0].seen.Load() != calls || hops[1].seen.Load() != calls || hops[2].seen.Load() != calls {
					t.Errorf("amplification: A %d B %d C %d D %d for %d calls (want D=%d, each hop %d)", hops[0].seen.Load(), hops[1].seen.Load(), hops[2].seen.Load(), d.seen.Load(), calls, want, calls)
				}
			})
		}
	}
}

func errorsAs(err error, target any) bool {
	return errorsAsImpl(err, target)
}

// Healthy chain under concurrency, HTTP/1.1 and HTTP/2: no call fails.
func TestReview51_HealthyConcurrent(t *testing.T) {
	review51Leak(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			hops, d := review51Chain(t, h2, review51Opts{})
			o := review51Opts{}
			if h2 {
				o.base = d.srv.Client().Transport
			}
			top := review51Top(o)
			var wg sync.WaitGroup
			var fails atomic.Int64
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 20 {
						ctx := context.Background()
						var cancel context.CancelFunc = func() {}
						if (i+j)%2 == 0 {
							ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
						}
						var out map[string]any
						if err := top.GetJSON(ctx, hops[0].srv.URL, &out); err != nil || out["ok"] != true {
							fails.Add(1)
							t.Logf("healthy call failed: %v", err)
						}
						cancel()
					}
				}()
			}
			wg.Wait()
			if fails.Load() > 0 {
				t.Errorf("%d healthy calls failed", fails.Load())
			}
			for i, h := range hops {
				if h.br.State() != resilience.StateClosed {
					t.Errorf("hop %d breaker %v", i, h.br.State())
				}
			}
			if d.seen.Load() != 64*20 {
				t.Errorf("D saw %d, want %d", d.seen.Load(), 64*20)
			}
			for _, h := range hops {
				h.srv.CloseClientConnections()
			}
			d.srv.CloseClientConnections()
		})
	}
}

var _ = httputil.NewSingleHostReverseProxy
var _ = strings.Contains

func review51TopPolicy(base, maxDelay time.Duration) *httpclient.Client {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(base), retrypolicy.MaxDelay(maxDelay))))
	return httpclient.New(httpclient.WithPipeline(p))
}
