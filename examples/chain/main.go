// Command chain shows retry amplification through a chain of services, and
// how the "don't retry" signal of package retrysignal stops it. Four real
// HTTP services on 127.0.0.1, A -> B -> C -> D, each call the next through
// the toolkit's client with 3 attempts; the user calls A once. When D
// fails, each layer retries what the one below already retried: D sees
// 3^3 = 27 requests per user request. With the signal, a service whose call
// failed after retrying tells its caller not to retry, and D sees 3.
//
// Run: go run ./examples/chain
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// scenario is one run of the chain.
type scenario struct {
	name   string
	signal bool          // services answer with the signal, and honour it
	quota  bool          // each service's retries draw on a retry quota
	slowD  time.Duration // D answers after this; 0: at once
	// recoverAfter makes D healthy after that many user requests; 0: never.
	recoverAfter int
}

// result is what a scenario measured.
type result struct {
	dPerRequest            float64 // requests D saw per user request, while failing
	p50, p99               time.Duration
	okAfterRecovery, after int
	status                 int // the user's last answer while D failed
}

const attempts = 3

// service is one hop: it calls next through a resilient client and answers
// with next's answer, or with the failure.
func service(next string, s scenario) http.Handler {
	rp := []retrypolicy.Option{retrypolicy.MaxAttempts(attempts), retrypolicy.BaseDelay(2 * time.Millisecond), retrypolicy.MaxDelay(20 * time.Millisecond)}
	if s.quota {
		rp = append(rp, retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 5, time.Second)))
	}
	opts := []httpclient.Option{httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(rp...)),
		pipeline.WithAttemptTimeout(150*time.Millisecond),
	))}
	if !s.signal {
		opts = append(opts, httpclient.TrustNoRetry(func(*url.URL) bool { return false }))
	}
	client := httpclient.New(opts...)
	h := func(w http.ResponseWriter, r *http.Request) error {
		var out struct{ Stock int }
		if err := client.GetJSON(r.Context(), next, &out); err != nil {
			if !s.signal {
				http.Error(w, "dependency failed", http.StatusServiceUnavailable)
				return nil
			}
			return err // retrysignal.Handler answers with the signal
		}
		_, _ = fmt.Fprintf(w, `{"stock":%d}`, out.Stock)
		return nil
	}
	return deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(h)))
}

// run runs s for requests user requests, one after the other, and measures.
func run(s scenario, requests int) result {
	var dCalls, healthy atomic.Int64
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dCalls.Add(1)
		if s.slowD > 0 {
			select {
			case <-time.After(s.slowD):
			case <-r.Context().Done():
				return
			}
		}
		if healthy.Load() == 0 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"stock":3}`)
	}))
	defer d.Close()
	c := httptest.NewServer(service(d.URL, s))
	defer c.Close()
	b := httptest.NewServer(service(c.URL, s))
	defer b.Close()
	a := httptest.NewServer(service(b.URL, s))
	defer a.Close()

	var res result
	var latencies []time.Duration
	failingCalls := int64(0)
	failing := 0
	for i := range requests {
		if s.recoverAfter > 0 && i == s.recoverAfter {
			failingCalls = dCalls.Load()
			healthy.Store(1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if healthy.Load() == 0 {
			failing++
			latencies = append(latencies, time.Since(start))
			if err == nil {
				res.status = resp.StatusCode
			}
		} else {
			res.after++
			if ok {
				res.okAfterRecovery++
			}
		}
	}
	if failingCalls == 0 {
		failingCalls = dCalls.Load()
	}
	if failing > 0 {
		res.dPerRequest = float64(failingCalls) / float64(failing)
		slices.Sort(latencies)
		res.p50 = latencies[len(latencies)/2]
		res.p99 = latencies[len(latencies)*99/100]
	}
	return res
}

var scenarios = []scenario{
	{name: "D answers 503", signal: false},
	{name: "D answers 503", signal: true},
	{name: "D slower than the attempt timeout", signal: false, slowD: 200 * time.Millisecond},
	{name: "D slower than the attempt timeout", signal: true, slowD: 200 * time.Millisecond},
	{name: "D answers 503, retry quota", signal: false, quota: true},
	{name: "D answers 503, retry quota", signal: true, quota: true},
	{name: "D recovers after 10 requests", signal: false, recoverAfter: 10},
	{name: "D recovers after 10 requests", signal: true, recoverAfter: 10},
}

const legend = `A user calls service A once per request; A calls B, B calls C, C calls D,
each through the toolkit's client with 3 attempts. Columns:
  scenario                     what D does; "retry quota": each client has a retry quota too
  signal                       the "don't retry" signal (package retrysignal) off or on
  D requests per user request  what the last service received, retries at every layer included
                               (3 x 3 x 3 = 27 without the signal, 3 with it)
  user p50, user p99           how long the user waited for A's answer, median and 99th percentile
  ok after recovery            calls that succeeded once D was back, out of those made after
                               ("-": D does not recover in this scenario)

`

func main() {
	fmt.Print(legend)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tsignal\tD requests per user request\tuser p50\tuser p99\tok after recovery\t")
	for _, s := range scenarios {
		n := 20
		if s.slowD > 0 {
			n = 5
		}
		r := run(s, n)
		signal := "off"
		if s.signal {
			signal = "on"
		}
		after := "-"
		if s.recoverAfter > 0 {
			after = fmt.Sprintf("%d/%d", r.okAfterRecovery, r.after)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%v\t%v\t%s\t\n", s.name, signal, r.dPerRequest,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), after)
	}
	tw.Flush()
}
