package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/chaos"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const (
	bucket      = 100 * time.Millisecond
	outageStart = 1 * time.Second
	outageEnd   = 3 * time.Second
	rampLength  = time.Second
	callsUntil  = 5 * time.Second // calls start until then
	callBudget  = 3 * time.Second
)

// strategy is one way to call the backend.
type strategy struct {
	name    string
	options func() []pipeline.Option
}

func retry(opts ...retrypolicy.Option) pipeline.Option {
	base := []retrypolicy.Option{retrypolicy.MaxAttempts(8), retrypolicy.BaseDelay(50 * time.Millisecond), retrypolicy.MaxDelay(time.Second)}
	return pipeline.WithRetry(retrypolicy.New(append(base, opts...)...))
}

var strategies = []strategy{
	{"immediate retry", func() []pipeline.Option { return []pipeline.Option{retry(retrypolicy.BaseDelay(0))} }},
	{"exponential, no jitter", func() []pipeline.Option { return []pipeline.Option{retry(retrypolicy.Jitter(retrypolicy.None))} }},
	{"full jitter", func() []pipeline.Option { return []pipeline.Option{retry(retrypolicy.Jitter(retrypolicy.Full))} }},
	{"equal jitter", func() []pipeline.Option { return []pipeline.Option{retry(retrypolicy.Jitter(retrypolicy.Equal))} }},
	{"decorrelated jitter", func() []pipeline.Option {
		return []pipeline.Option{retry(retrypolicy.Jitter(retrypolicy.Decorrelated))}
	}},
	{"pipeline (breaker, full jitter, retry quota)", func() []pipeline.Option {
		return []pipeline.Option{
			pipeline.WithBreaker(breaker.New("backend", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 50),
				breaker.Window(time.Second, 10), breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(10))),
			retry(retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, time.Second))),
		}
	}},
}

// outcome is one strategy's run.
type outcome struct {
	name      string
	load      []chaos.Bucket
	offered   int64
	succeeded int64
	latencies []time.Duration // of the calls that succeeded, sorted
	start     time.Time
}

func runOutage(clients int) []outcome {
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
	capacity := clients * 15 / 100 // 1.5 x the offered calls per bucket
	backend.SetCapacity(capacity)
	backend.SetLatency(5*time.Millisecond, 10*time.Millisecond)
	go func() {
		time.Sleep(outageStart)
		backend.SetDown(true)
		time.Sleep(outageEnd - outageStart)
		backend.Recover(capacity, rampLength)
	}()

	var mu sync.Mutex
	out := outcome{name: s.name, start: start}
	var offered, succeeded atomic.Int64
	var wg sync.WaitGroup
	// Open loop: each client starts a call every second whatever became of
	// the last one, as independent users would.
	for c := range clients {
		wg.Go(func() {
			time.Sleep(time.Duration(c) * time.Second / time.Duration(clients))
			for t := time.NewTicker(time.Second); time.Since(start) < callsUntil; <-t.C {
				offered.Add(1)
				wg.Go(func() {
					t0 := time.Now()
					if err := client.GetJSON(context.Background(), "http://backend/", nil); err == nil {
						succeeded.Add(1)
						mu.Lock()
						out.latencies = append(out.latencies, time.Since(t0))
						mu.Unlock()
					}
				})
			}
		})
	}
	wg.Wait()
	out.load = backend.Load()
	out.offered, out.succeeded = offered.Load(), succeeded.Load()
	slices.Sort(out.latencies)
	return out
}

// recovery returns how long after the outage's end the backend's answers
// became and stayed at least 90% successful, or false if they never did.
func (o outcome) recovery() (time.Duration, bool) {
	first := int(outageEnd / bucket)
	rec := -1
	for i := first; i < len(o.load); i++ {
		b := o.load[i]
		if b.Requests == 0 || float64(b.OK) >= 0.9*float64(b.Requests) {
			if rec < 0 {
				rec = i
			}
		} else {
			rec = -1
		}
	}
	if rec < 0 {
		return 0, false
	}
	return time.Duration(rec-first) * bucket, true
}

func (o outcome) totals() (calls, peak int) {
	for _, b := range o.load {
		calls += b.Requests
		peak = max(peak, b.Requests)
	}
	return calls, peak
}

func printOutage(w io.Writer, results []outcome, clients int) {
	offeredPerBucket := float64(clients) * float64(bucket) / float64(time.Second)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tbackend calls\tpeak per 100 ms\tpeak / offered\tcalls ok\tp50\tp99\trecovered after\t")
	for _, o := range results {
		calls, peak := o.totals()
		rec := "never"
		if d, ok := o.recovery(); ok {
			rec = d.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fx\t%d/%d\t%v\t%v\t%s\t\n", o.name, calls, peak, float64(peak)/offeredPerBucket,
			o.succeeded, o.offered, percentile(o.latencies, 0.5).Round(time.Millisecond),
			percentile(o.latencies, 0.99).Round(time.Millisecond), rec)
	}
	tw.Flush()
}
