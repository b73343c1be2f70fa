package httpclient_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Short caller budgets against a healthy but slowish bottom must not open
// any hop's breaker, and healthy calls afterwards must succeed.
func TestReview51_ShortBudgetsDoNotOpen(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, budget := range []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond, 90 * time.Millisecond} {
			t.Run(fmt.Sprintf("h2=%v/%v", h2, budget), func(t *testing.T) {
				hops, d := review51Chain(t, h2, review51Opts{consecutive: 3})
				d.delay.Store(int64(70 * time.Millisecond))
				o := review51Opts{}
				if h2 {
					o.base = d.srv.Client().Transport
				}
				top := review51Top(o)
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 5 {
							ctx, cancel := context.WithTimeout(context.Background(), budget)
							_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
							cancel()
						}
					}()
				}
				wg.Wait()
				time.Sleep(50 * time.Millisecond)
				for i, h := range hops {
					if s := h.br.State(); s != resilience.StateClosed {
						t.Errorf("hop %c breaker %v after short-budget callers (counts %+v)", 'A'+i, s, h.br.Counts())
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				var out map[string]any
				if err := top.GetJSON(ctx, hops[0].srv.URL, &out); err != nil {
					t.Errorf("healthy call after short budgets failed: %v", err)
				}
			})
		}
	}
}

// Cancels at random points (often mid-backoff) against a healthy slow
// bottom: nothing counts, nothing leaks.
func TestReview51_CancelMidCall(t *testing.T) {
	review51Leak(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			hops, d := review51Chain(t, h2, review51Opts{consecutive: 3})
			d.delay.Store(int64(40 * time.Millisecond))
			o := review51Opts{}
			if h2 {
				o.base = d.srv.Client().Transport
			}
			top := review51Top(o)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 5 {
						ctx, cancel := context.WithCancel(context.Background())
						time.AfterFunc(time.Duration((i*5+j)%40)*time.Millisecond, cancel)
						_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
						cancel()
					}
				}()
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond)
			for i, h := range hops {
				if s := h.br.State(); s != resilience.StateClosed {
					t.Errorf("hop %c breaker %v after canceled callers (counts %+v)", 'A'+i, s, h.br.Counts())
				}
			}
			var out map[string]any
			if err := top.GetJSON(context.Background(), hops[0].srv.URL, &out); err != nil {
				t.Errorf("healthy call after cancels failed: %v", err)
			}
			for _, h := range hops {
				h.srv.CloseClientConnections()
			}
			d.srv.CloseClientConnections()
		})
	}
}

// Cancel (no deadline) while C is in a long backoff against a failing
// bottom: C stops, D sees no more attempts, hop handlers return, no leak.
func TestReview51_CancelMidBackoff(t *testing.T) {
	review51Leak(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			hops, d := review51Chain(t, h2, review51Opts{baseDelay: 400 * time.Millisecond, maxDelay: 400 * time.Millisecond, consecutive: 100})
			d.status.Store(503)
			hc := http.DefaultClient
			if h2 {
				hc = d.srv.Client()
			}
			var n0 int64
			for range 5 {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(60*time.Millisecond, cancel)
				req, _ := http.NewRequestWithContext(ctx, "GET", hops[0].srv.URL, nil)
				start := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if el := time.Since(start); el > 200*time.Millisecond {
					t.Errorf("top returned after %v", el)
				}
				cancel()
			}
			time.Sleep(1500 * time.Millisecond)
			n0 = d.seen.Load()
			t.Logf("D saw %d for 5 canceled calls; breakers %v %v %v", n0, hops[0].br.State(), hops[1].br.State(), hops[2].br.State())
			// Each call: D's first attempt (fast 503) then C waits; full jitter
			// may make C's first backoff short, so allow 2 per call.
			if n0 > 10 {
				t.Errorf("D saw %d requests for 5 calls canceled mid-backoff", n0)
			}
			for _, h := range hops {
				h.srv.CloseClientConnections()
			}
			d.srv.CloseClientConnections()
		})
	}
}

// The budget propagates and shrinks hop by hop, and the bottom's request
// ends no later than the top's deadline (+ rounding slack).
func TestReview51_BudgetPropagates(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			hops, d := review51Chain(t, h2, review51Opts{})
			d.delay.Store(int64(2 * time.Second))
			o := review51Opts{}
			if h2 {
				o.base = d.srv.Client().Transport
			}
			top := review51Top(o)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			err := top.GetJSON(ctx, hops[0].srv.URL, nil)
			cancel()
			el := time.Since(start)
			t.Logf("err %v after %v; budgets A %d B %d C %d", err, el, hops[0].budget.Load(), hops[1].budget.Load(), hops[2].budget.Load())
			if el > 400*time.Millisecond {
				t.Errorf("deadline not honoured: %v", el)
			}
			prev := int64(301)
			for i, h := range hops {
				b := h.budget.Load()
				if b <= 0 || b > prev {
					t.Errorf("hop %c budget %d ms, previous %d", 'A'+i, b, prev)
				}
				prev = b
			}
			v, _ := d.hdrs.Load(int64(1))
			hd := v.(http.Header)
			if b, ok := deadline.Parse(hd.Get(deadline.Header)); !ok || b > time.Duration(prev)*time.Millisecond {
				t.Errorf("bottom budget %v (ok %v), C's %d ms", b, ok, prev)
			}
			if n := d.seen.Load(); n != 1 {
				t.Errorf("D saw %d for one call whose budget ran out", n)
			}
		})
	}
}

// A hop's own budget shorter than the caller's; and longer.
func TestReview51_HopBudgetShorterLonger(t *testing.T) {
	for _, hb := range []time.Duration{80 * time.Millisecond, 5 * time.Second} {
		t.Run(hb.String(), func(t *testing.T) {
			hops, d := review51Chain(t, false, review51Opts{budget: hb, consecutive: 1000})
			d.delay.Store(int64(150 * time.Millisecond))
			top := review51Top(review51Opts{})
			ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second)
			start := time.Now()
			err := top.GetJSON(ctx, hops[0].srv.URL, nil)
			cancel()
			el := time.Since(start)
			t.Logf("hop budget %v: err %v after %v; A %d B %d C %d D %d", hb, err, el, hops[0].seen.Load(), hops[1].seen.Load(), hops[2].seen.Load(), d.seen.Load())
			if hb > time.Second && err != nil {
				t.Errorf("healthy slow call failed: %v", err)
			}
			if hb < time.Second && d.seen.Load() > 3 {
				t.Errorf("amplification: D saw %d", d.seen.Load())
			}
		})
	}
}

// Hostile/malformed budget headers from an untrusted caller straight to A.
func TestReview51_HostileBudgetHeaders(t *testing.T) {
	hops, d := review51Chain(t, false, review51Opts{consecutive: 3})
	d.delay.Store(int64(20 * time.Millisecond))
	vals := [][]string{{"-1"}, {"NaN"}, {"99999999999"}, {"999999999"}, {"1e3"}, {"0x10"}, {"+50"}, {" 5000 "}, {"5000", "1"}, {strings.Repeat("9", 100000)}, {"\t3000"}, {"３０００"}, {""}, {"0"}, {"1"}, {"5"}}
	for _, v := range vals {
		for range 5 {
			req, _ := http.NewRequest("GET", hops[0].srv.URL, nil)
			req.Header[deadline.Header] = v
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Logf("%.20q: %v", v, err)
				continue
			}
			resp.Body.Close()
			if len(v) == 1 && len(v[0]) < 20 {
				if _, ok := deadline.Parse(v[0]); !ok && resp.StatusCode != 200 {
					t.Errorf("malformed %q failed a healthy call: %d", v, resp.StatusCode)
				}
			}
			if len(v) > 1 && resp.StatusCode != 200 {
				t.Errorf("repeated %q failed a healthy call: %d", v, resp.StatusCode)
			}
		}
	}
	for i, h := range hops {
		if s := h.br.State(); s != resilience.StateClosed {
			t.Errorf("hop %c breaker %v after hostile headers (counts %+v)", 'A'+i, s, h.br.Counts())
		}
	}
	resp, err := http.Get(hops[0].srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("plain healthy call failed: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
}
