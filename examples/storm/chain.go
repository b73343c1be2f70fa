package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// The flapping chain: the trade-off of the "don't retry" signal (package
// retrysignal). Four services, A -> B -> C -> D, as in examples/chain,
// each calling the next over HTTP (in memory, so in virtual time) through
// the toolkit's client with 3 attempts, base 2 ms, cap 20 ms and an
// attempt timeout of 150 ms. D is down (503) for 60 ms of every 300 ms.
// Users call A, 200 a second, open loop, each with 1 s.
//
// With the signal, only C retries D: C's 3 attempts span a few
// milliseconds and fall in one down spell when the first does, and the
// layers above, told not to retry, pass the failure up. Without it, B and
// A retry too, their retries spanning more time than a down spell: the
// blip is masked, at the cost of up to 27 requests to D for one user
// request.
const (
	chainRate  = 200
	chainUntil = 3 * time.Second
	// chainOffset is when the first user request starts.
	chainOffset = 333_667 * time.Nanosecond
)

// chainResult is one run of the flapping chain.
type chainResult struct {
	signal   bool
	calls    int // user requests
	ok       int
	dPerCall float64 // requests D received per user request
	p99      time.Duration
}

// chainService is one hop: it calls next through a resilient client and
// answers with next's answer, or with the failure (and the signal, if on).
func chainService(next http.RoundTripper, nextURL string, signal bool) http.Handler {
	opts := []httpclient.Option{
		httpclient.Base(next),
		httpclient.WithPipeline(pipeline.New(
			// No jitter, so that the run does not depend on math/rand's
			// global source: a run is the same every time.
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond),
				retrypolicy.MaxDelay(20*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
			pipeline.WithAttemptTimeout(150*time.Millisecond),
		)),
	}
	if !signal {
		opts = append(opts, httpclient.TrustNoRetry(func(*url.URL) bool { return false }))
	}
	client := httpclient.New(opts...)
	h := func(w http.ResponseWriter, r *http.Request) error {
		var out struct{ OK bool }
		if err := client.GetJSON(r.Context(), nextURL, &out); err != nil {
			if !signal {
				http.Error(w, "dependency failed", http.StatusServiceUnavailable)
				return nil
			}
			return err // retrysignal.Handler answers with the signal
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
		return nil
	}
	return deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(h)))
}

// runChain runs the flapping chain, in a synctest bubble or in real time.
func runChain(signal bool) chainResult {
	start := time.Now()
	d := chaos.New(bucket, nil)
	stop := make(chan struct{})
	var flaps sync.WaitGroup
	flaps.Go(func() {
		for t := time.Duration(0); ; t += flapPeriod {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(t))):
			}
			d.SetDown(true)
			time.Sleep(time.Until(start.Add(t + flapDown)))
			d.SetDown(false)
		}
	})
	next, nextURL := d.Transport(), "http://d/"
	for _, name := range []string{"c", "b", "a"} {
		hop := chaos.New(bucket, chainService(next, nextURL, signal))
		next, nextURL = hop.Transport(), "http://"+name+"/"
	}
	user := &http.Client{Transport: next}

	n := int(chainUntil * chainRate / time.Second)
	ok := make([]bool, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	var okCount atomic.Int64
	for i := range n {
		// Off the flaps' grid, so that no request reaches D at the very
		// instant it goes down or up, where the order in which goroutines
		// run would decide its fate.
		time.Sleep(time.Until(start.Add(chainOffset + time.Duration(i)*time.Second/chainRate)))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			t0 := time.Now()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nextURL, nil)
			resp, err := user.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok[i] = resp.StatusCode == http.StatusOK
			}
			took[i] = time.Since(t0)
			if ok[i] {
				okCount.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	flaps.Wait()
	slices.Sort(took)
	return chainResult{signal: signal, calls: n, ok: int(okCount.Load()),
		dPerCall: float64(d.Received()) / float64(n), p99: percentile(took, 0.99)}
}

func printChain(w io.Writer, results []chainResult) {
	fmt.Fprintf(w, "A -> B -> C -> D, 3 attempts at each hop; D down 60 ms of every 300 ms; %d user requests a second for %v.\n\n", chainRate, chainUntil)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "signal\tusers ok\tD requests per user request\tuser p99\t")
	for _, r := range results {
		on := "off"
		if r.signal {
			on = "on"
		}
		fmt.Fprintf(tw, "%s\t%d of %d (%.1f%%)\t%.2f\t%v\t\n", on, r.ok, r.calls, 100*float64(r.ok)/float64(r.calls), r.dPerCall, r.p99.Round(time.Millisecond))
	}
	tw.Flush()
}

// runChains runs the flapping chain without the signal and with it, at
// once.
func runChains() []chainResult {
	results := make([]chainResult, 2)
	var wg sync.WaitGroup
	for i, signal := range []bool{false, true} {
		wg.Go(func() { results[i] = runChain(signal) })
	}
	wg.Wait()
	return results
}
