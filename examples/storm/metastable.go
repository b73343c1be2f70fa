package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The metastable scenario (Huang et al., "Metastable Failures in the Wild",
// OSDI 2022): a server with a fixed number of workers and a FIFO queue,
// offered 80% of its capacity, open loop. A request whose caller has given
// up still takes a worker when its turn comes, since the server cannot
// tell. A two-second dip of capacity (the workers run at half speed) is the
// trigger: the queue grows, attempts time out, and if the clients retry
// them, the retries keep the queue long after the dip is over.
const (
	msWorkers = 10
	// msService is the mean service time: the server can serve
	// msWorkers/msService = 1000 requests a second.
	msService = 10 * time.Millisecond
	// msRate is the calls offered per second, 80% of the capacity.
	msRate     = 800
	msDipStart = 2 * time.Second
	msDipEnd   = 4 * time.Second
	// msSlowdown is how much longer a request takes during the dip.
	msSlowdown = 2
	msUntil    = 10 * time.Second // calls start until then
	// msDeadline is the time a caller gives each call, retries included;
	// msAttemptTimeout each attempt.
	msDeadline       = time.Second
	msAttemptTimeout = 250 * time.Millisecond
	// msQueue bounds the queue; no run comes near it.
	msQueue = 1 << 17
)

var errQueueFull = errors.New("queue full")

// server is the metastable scenario's backend. Its methods are safe for
// concurrent use.
type server struct {
	start  time.Time
	queue  chan *job
	stop   chan struct{}
	wg     sync.WaitGroup
	served atomic.Int64 // requests a worker spent time on
	wasted atomic.Int64 // of them, those whose caller had given up
}

// job is one request in the queue; done is closed when it has been served.
type job struct {
	ctx  context.Context
	done chan struct{}
}

func newServer(start time.Time) *server {
	s := &server{start: start, queue: make(chan *job, msQueue), stop: make(chan struct{})}
	for range msWorkers {
		s.wg.Go(s.work)
	}
	return s
}

// work serves the queue in order, each request for a service time drawn
// from [0.5, 1.5] times msService, msSlowdown times that during the dip.
func (s *server) work() {
	for {
		select {
		case <-s.stop:
			return
		case j := <-s.queue:
			d := msService/2 + rand.N(msService)
			if t := time.Since(s.start); t >= msDipStart && t < msDipEnd {
				d *= msSlowdown
			}
			time.Sleep(d)
			s.served.Add(1)
			if j.ctx.Err() != nil {
				s.wasted.Add(1)
			}
			close(j.done)
		}
	}
}

// call is one attempt: it queues a request and waits for it to be served
// or for ctx to end.
func (s *server) call(ctx context.Context) (struct{}, error) {
	j := &job{ctx: ctx, done: make(chan struct{})}
	select {
	case s.queue <- j:
	default:
		return struct{}{}, errQueueFull
	}
	select {
	case <-j.done:
		return struct{}{}, nil
	case <-ctx.Done():
		return struct{}{}, ctx.Err()
	}
}

// close stops the workers, leaving what is queued.
func (s *server) close() {
	close(s.stop)
	s.wg.Wait()
}

// msRetry is the retry stage of the metastable strategies: up to 4
// attempts, cap 1 s, with opts on top.
func msRetry(opts ...retrypolicy.Option) pipeline.Option {
	base := []retrypolicy.Option{retrypolicy.MaxAttempts(4), retrypolicy.MaxDelay(time.Second)}
	return pipeline.WithRetry(retrypolicy.New(append(base, opts...)...))
}

// msPipeline is the full Pipeline of the metastable scenario: a breaker
// that opens when half the calls of its one-second window fail, full
// jitter from 50 ms and a retry quota of 10% of the calls.
func msPipeline(extra ...func() pipeline.Option) func() []pipeline.Option {
	return func() []pipeline.Option {
		opts := []pipeline.Option{
			pipeline.WithBreaker(breaker.New("server", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 50),
				breaker.Window(time.Second, 10), breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(10))),
			msRetry(retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, time.Second))),
		}
		for _, e := range extra {
			opts = append(opts, e())
		}
		return opts
	}
}

const naiveName = "naive retry"

// msStrategies are the strategies of the metastable scenario. Every one
// has the caller's deadline (msDeadline) and the attempt timeout
// (msAttemptTimeout) added.
var msStrategies = []strategy{
	{naiveName, func() []pipeline.Option { return []pipeline.Option{msRetry(retrypolicy.BaseDelay(0))} }},
	{"full jitter", func() []pipeline.Option {
		return []pipeline.Option{msRetry(retrypolicy.BaseDelay(50 * time.Millisecond))}
	}},
	{pipelineName, msPipeline()},
	{throttledName, msPipeline(throttling)},
	{waitName, msPipeline(waitWhenOpen)},
	{"pipeline + hedging", msPipeline(hedging)},
	{"pipeline + AIMD limit", msPipeline(aimd)},
}

// msOutcome is one strategy's metastable run, counted per bucket.
type msOutcome struct {
	name     string
	offered  []int // calls started
	ok       []int // calls that succeeded within their deadline, in the bucket they ended
	attempts int64 // requests sent to the server
	served   int64 // requests a worker spent time on
	wasted   int64 // of them, those whose caller had given up
}

// runMetastable runs every strategy, each against its own server, all at
// once.
func runMetastable(strategies []strategy) []msOutcome {
	results := make([]msOutcome, len(strategies))
	var wg sync.WaitGroup
	for i, s := range strategies {
		wg.Go(func() { results[i] = runMetastableStrategy(s) })
	}
	wg.Wait()
	return results
}

func runMetastableStrategy(s strategy) msOutcome {
	start := time.Now()
	srv := newServer(start)
	p := pipeline.New(append(s.options(), pipeline.WithTimeBudget(msDeadline), pipeline.WithAttemptTimeout(msAttemptTimeout))...)
	var attempts atomic.Int64
	op := func(ctx context.Context) (struct{}, error) {
		attempts.Add(1)
		return srv.call(ctx)
	}
	offered, ok := newCounter(start), newCounter(start)
	var wg sync.WaitGroup
	// Open loop, evenly spaced.
	for i := 0; time.Duration(i)*time.Second/msRate < msUntil; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / msRate)))
		t0 := time.Now()
		offered.add(t0)
		wg.Go(func() {
			if _, err := pipeline.Do(context.Background(), p, op); err == nil {
				ok.add(t0)
			}
		})
	}
	wg.Wait()
	srv.close()
	return msOutcome{name: s.name, offered: offered.counts(), ok: ok.counts(),
		attempts: attempts.Load(), served: srv.served.Load(), wasted: srv.wasted.Load()}
}

// goodput returns the calls that succeeded per bucket as a share of those
// offered in it, up to msUntil.
func (o msOutcome) goodput() []float64 {
	g := make([]float64, msUntil/bucket)
	for i := range g {
		if n := at(o.offered, i); n > 0 {
			g[i] = float64(at(o.ok, i)) / float64(n)
		}
	}
	return g
}

// meanGoodput returns the calls that succeeded in [from, to) as a share of
// those offered in it.
func (o msOutcome) meanGoodput(from, to time.Duration) float64 {
	return float64(sum(o.ok, from, to)) / float64(sum(o.offered, from, to))
}

// maxGoodput returns the highest goodput of a bucket in [from, to).
func (o msOutcome) maxGoodput(from, to time.Duration) float64 {
	g := o.goodput()
	m := 0.0
	for i := int(from / bucket); i < int(to/bucket); i++ {
		m = max(m, g[i])
	}
	return m
}

// back returns how long after the dip the goodput rose above share and
// stayed there until msUntil; false if it did not.
func (o msOutcome) back(share float64) (time.Duration, bool) {
	g := o.goodput()
	back := settledFrom(int(msDipEnd/bucket), len(g), func(i int) bool { return g[i] > share })
	return time.Duration(back)*bucket - msDipEnd, back >= 0
}

const afterDip = 5 * time.Second

func printMetastable(w io.Writer, results []msOutcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "strategy\tgoodput before\tduring dip\t%v after dip: mean\tbest 100 ms\tabove 95%% after\trequests / call\twasted work\t\n", afterDip)
	for _, o := range results {
		back := "never"
		if d, ok := o.back(0.95); ok {
			back = d.String()
		}
		calls := sum(o.offered, 0, msUntil)
		fmt.Fprintf(tw, "%s\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%s\t%.2f\t%.0f%%\t\n", o.name,
			100*o.meanGoodput(time.Second, msDipStart), 100*o.meanGoodput(msDipStart, msDipEnd),
			100*o.meanGoodput(msDipEnd, msDipEnd+afterDip), 100*o.maxGoodput(msDipEnd, msDipEnd+afterDip),
			back, float64(o.attempts)/float64(calls), 100*float64(o.wasted)/float64(max(o.served, 1)))
	}
	tw.Flush()
}

// metastableChart is the chart of the goodput per bucket, in percent.
func metastableChart(results []msOutcome) chart {
	c := chart{
		title: fmt.Sprintf("Goodput per 100 ms (%% of the calls offered), %d%% load, half speed %v to %v",
			int64(100*msRate*msService/(msWorkers*time.Second)), msDipStart, msDipEnd),
		shadeFrom: msDipStart, shadeTo: msDipEnd, shadeLabel: "half speed",
		ref: 100, refLabel: "all calls",
	}
	for _, o := range results {
		g := o.goodput()
		for i := range g {
			g[i] *= 100
		}
		c.lines = append(c.lines, line{o.name, g})
	}
	return c
}
