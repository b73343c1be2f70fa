package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

const (
	outageStart = 1 * time.Second
	outageEnd   = 3 * time.Second
	rampLength  = time.Second
	callsUntil  = 5 * time.Second // calls start until then
	callBudget  = 3 * time.Second
	// headroom is the backend's capacity over the offered load.
	headroom = 1.5
	// healthyAt is when the recovering backend's capacity, ramping from a
	// tenth of its full value, first covers the offered load.
	healthyAt = outageEnd + rampLength*2/3 // rampLength / headroom
	// goodputShare is the share of the offered calls per bucket that must
	// succeed for the goodput to count as full.
	goodputShare = 0.9
)

// strategy is one way to call a dependency: the options of its Pipeline,
// made afresh for each run (a breaker or quota must not carry over).
type strategy struct {
	name    string
	options func() []pipeline.Option
}

// outageRetry is the retry stage of every outage strategy: up to 8
// attempts, base 50 ms, cap 1 s, with opts on top.
func outageRetry(opts ...retrypolicy.Option) pipeline.Option {
	base := []retrypolicy.Option{retrypolicy.MaxAttempts(8), retrypolicy.BaseDelay(50 * time.Millisecond), retrypolicy.MaxDelay(time.Second)}
	return pipeline.WithRetry(retrypolicy.New(append(base, opts...)...))
}

// outagePipeline is the full Pipeline of the outage: a breaker that opens
// after 20 failures in a row and probes with 10 calls every 300 ms, full
// jitter and a retry quota of 10% of the calls, with extra on top.
func outagePipeline(extra ...func() pipeline.Option) func() []pipeline.Option {
	return func() []pipeline.Option {
		opts := []pipeline.Option{
			pipeline.WithBreaker(breaker.New("backend", breaker.ConsecutiveFailures(20),
				breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(10))),
			outageRetry(retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, time.Second))),
		}
		for _, e := range extra {
			opts = append(opts, e())
		}
		return opts
	}
}

// The stages added to a Pipeline, each made afresh for a run.
var (
	throttling = func() pipeline.Option {
		return pipeline.WithThrottle(throttle.New())
	}
	waitWhenOpen = func() pipeline.Option { return pipeline.WaitWhenOpen() }
	aimd         = func() pipeline.Option { return pipeline.WithLimit(limit.NewAIMD()) }
	hedging      = func() pipeline.Option {
		return pipeline.WithHedging(hedge.New(hedge.Quantile(0.9), hedge.MaxExtra(1)))
	}
)

// retryOnly makes a strategy of the retry stage alone.
func retryOnly(opts ...retrypolicy.Option) func() []pipeline.Option {
	return func() []pipeline.Option { return []pipeline.Option{outageRetry(opts...)} }
}

const (
	pipelineName  = "pipeline (breaker, full jitter, retry quota)"
	throttledName = "pipeline + throttling"
	waitName      = "pipeline + wait when open"
)

var outageStrategies = []strategy{
	{"immediate retry", retryOnly(retrypolicy.BaseDelay(0))},
	{"exponential, no jitter", retryOnly(retrypolicy.Jitter(retrypolicy.None))},
	{"full jitter", retryOnly(retrypolicy.Jitter(retrypolicy.Full))},
	{"equal jitter", retryOnly(retrypolicy.Jitter(retrypolicy.Equal))},
	{"decorrelated jitter", retryOnly(retrypolicy.Jitter(retrypolicy.Decorrelated))},
	{pipelineName, outagePipeline()},
	{throttledName, outagePipeline(throttling)},
	{waitName, outagePipeline(waitWhenOpen)},
}

// withoutBreaker names the outage strategies of the retry stage alone.
var withoutBreaker = map[string]bool{
	"immediate retry": true, "exponential, no jitter": true, "full jitter": true,
	"equal jitter": true, "decorrelated jitter": true,
}

// outcome is one strategy's outage run. Every slice counts per bucket from
// the start of the run.
type outcome struct {
	name      string
	load      []chaos.Bucket  // what the backend received
	offered   []int           // calls started by the clients
	ok        []int           // calls that succeeded, in the bucket they ended
	latencies []time.Duration // of the calls that succeeded, sorted
}

// runOutage runs every outage strategy, each against its own backend, all
// at once.
func runOutage(clients int, strategies []strategy) []outcome {
	results := make([]outcome, len(strategies))
	var wg sync.WaitGroup
	for i, s := range strategies {
		wg.Go(func() { results[i] = runStrategy(s, clients) })
	}
	wg.Wait()
	return results
}

func runStrategy(s strategy, clients int) outcome {
	start := time.Now()
	backend := chaos.New(bucket, nil)
	client := httpclient.New(httpclient.Base(backend.Transport()),
		httpclient.WithPipeline(pipeline.New(append(s.options(), pipeline.WithTimeBudget(callBudget))...)))
	capacity := int(float64(clients) * headroom * float64(bucket) / float64(time.Second))
	backend.SetCapacity(capacity)
	backend.SetLatency(5*time.Millisecond, 10*time.Millisecond)
	go func() {
		time.Sleep(outageStart)
		backend.SetDown(true)
		time.Sleep(outageEnd - outageStart)
		backend.Recover(capacity, rampLength)
	}()

	offered, ok := newCounter(start), newCounter(start)
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	// Open loop: each client starts a call every second whatever became of
	// the last one, as independent users would.
	for c := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(c) * time.Second / time.Duration(clients))
			for t := time.NewTicker(time.Second); time.Since(start) < callsUntil; <-t.C {
				t0 := time.Now()
				offered.add(t0)
				wg.Go(func() {
					if err := client.GetJSON(context.Background(), "http://backend/", nil); err == nil {
						ok.add(time.Now())
						mu.Lock()
						latencies = append(latencies, time.Since(t0))
						mu.Unlock()
					}
				})
			}
		})
	}
	wg.Wait()
	slices.Sort(latencies)
	return outcome{name: s.name, load: backend.Load(), offered: offered.counts(), ok: ok.counts(), latencies: latencies}
}

// sent returns the backend requests per bucket.
func (o outcome) sent() []int {
	s := make([]int, len(o.load))
	for i, b := range o.load {
		s[i] = b.Requests
	}
	return s
}

// calls returns the calls the backend received and the calls the clients
// made, in all.
func (o outcome) calls() (sent, offered int) {
	return sum(o.sent(), 0, time.Duration(len(o.load))*bucket), sum(o.offered, 0, callsUntil)
}

// outageLoad returns the backend requests during the outage over the calls
// offered during it.
func (o outcome) outageLoad() float64 {
	return float64(sum(o.sent(), outageStart, outageEnd)) / float64(sum(o.offered, outageStart, outageEnd))
}

// peak returns the largest ratio, over the buckets in which clients started
// calls, of the requests the backend received to the calls offered in that
// bucket, and the bucket's start.
func (o outcome) peak() (ratio float64, when time.Duration) {
	sent := o.sent()
	for i, n := range o.offered {
		if r := float64(at(sent, i)) / float64(n); n > 0 && r > ratio {
			ratio, when = r, time.Duration(i)*bucket
		}
	}
	return ratio, when
}

// goodputBack returns when, after the outage began, the calls succeeding
// per bucket reached goodputShare of those offered in it, and stayed there
// while clients made calls; false if they never did.
func (o outcome) goodputBack() (time.Duration, bool) {
	back := settledFrom(int(outageStart/bucket), int(callsUntil/bucket), func(i int) bool {
		return float64(at(o.ok, i)) >= goodputShare*float64(at(o.offered, i))
	})
	return time.Duration(back) * bucket, back >= 0
}

func (o outcome) succeeded() int { return sum(o.ok, 0, time.Duration(len(o.ok))*bucket) }

func printOutage(w io.Writer, results []outcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tbackend calls\tsent / offered in outage\tpeak sent / offered\tcalls ok\tp50\tp99\tgoodput back after\t")
	for _, o := range results {
		sent, offered := o.calls()
		peak, peakAt := o.peak()
		back := "never"
		if d, ok := o.goodputBack(); ok {
			back = (d - outageEnd).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2fx\t%.1fx at %v\t%d/%d\t%v\t%v\t%s\t\n", o.name, sent, o.outageLoad(), peak, peakAt,
			o.succeeded(), offered, percentile(o.latencies, 0.5).Round(time.Millisecond),
			percentile(o.latencies, 0.99).Round(time.Millisecond), back)
	}
	tw.Flush()
	fmt.Fprint(w, `
  backend calls             requests the backend received over the whole run, retries included
  sent / offered in outage  those requests during the outage, over the calls the clients made then
  peak sent / offered       the same in the worst 100 ms bucket, and when it was
  calls ok                  calls that succeeded, of all the calls made
  p50, p99                  how long a call took, median and 99th percentile
  goodput back after        how long after the outage the calls succeeding were back at 90%
                            of the offered load ("never": not within the run)
`)
}
