package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// outcome is one call's: when it started and ended, from the start of the
// run, and whether it succeeded within the caller's deadline.
type outcome struct {
	start, end time.Duration
	ok         bool
}

// result is one strategy's run of one scenario.
type result struct {
	strategy string
	sc       *scenario
	calls    []outcome // in the order they started
	requests int       // that the backend received
	load     []int     // of them, per bucket
	// late is how late each call started against its schedule: 0 in
	// virtual time, the harness's own lag in real time.
	late []time.Duration
}

// transport puts a backend behind a transport. attempts returns how a
// call's attempt n reaches it, and how to stop. pipelines, if set, is the
// transport's own integration of the Pipeline, through which the Pipeline's
// strategies call instead: it returns how a call made through p reaches
// the backend, attempts and all, and how to stop. The zero transport calls
// the backend in process.
type transport struct {
	attempts  func(b *backend) (send func(ctx context.Context, c *call, n uint64) error, stop func())
	pipelines func(b *backend, p *pipeline.Pipeline) (caller, func())
}

// runScenario runs every strategy through sc, each against a backend of
// its own, all at once. In a synctest bubble the run takes virtual time;
// outside one, real time.
func runScenario(sc *scenario, strategies []strategy, seed uint64) []result {
	return runScenarioWith(sc, strategies, seed, transport{})
}

// runScenarioWith is runScenario with each backend behind tr.
func runScenarioWith(sc *scenario, strategies []strategy, seed uint64, tr transport) []result {
	results := make([]result, len(strategies))
	var wg sync.WaitGroup
	for i, s := range strategies {
		wg.Go(func() { results[i] = runStrategy(sc, s, seed, tr) })
	}
	wg.Wait()
	return results
}

func runStrategy(sc *scenario, s strategy, seed uint64, tr transport) result {
	start := time.Now()
	b := newBackend(sc, start)
	var do caller
	var send func(ctx context.Context, c *call, n uint64) error
	stop := func() {} // called before the backend's counts are read: a remote one sends them then
	if s.pipeline != nil && tr.pipelines != nil {
		// As a user builds it: the retry policy's own jitter, not the
		// call's seeded draws, which only the harness knows.
		do, stop = tr.pipelines(b, pipeline.New(s.pipeline(sc, retrypolicy.New)...))
	} else {
		do = s.build(sc)
		if tr.attempts != nil {
			send, stop = tr.attempts(b)
		}
	}
	n := int(sc.until * time.Duration(sc.rate) / time.Second)
	calls := make([]outcome, n)
	late := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(sc.rate))
		time.Sleep(time.Until(at))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), sc.deadline)
			defer cancel()
			t0 := time.Now()
			late[i] = t0.Sub(at) // when the call started, as the table has it: its goroutine may wait to run after a burst (review166)
			err := do(ctx, &call{id: uint64(i), seed: seed, b: b, send: send})
			t1 := time.Now()
			calls[i] = outcome{start: t0.Sub(start), end: t1.Sub(start), ok: err == nil && t1.Sub(t0) <= sc.deadline}
		})
	}
	wg.Wait()
	stop()
	b.close()
	load := b.requests.counts()
	return result{strategy: s.name, sc: sc, calls: calls, requests: sum(load, 0, time.Duration(len(load))*bucket), load: load, late: late}
}

// ok returns how many calls succeeded.
func (r result) ok() int {
	n := 0
	for _, c := range r.calls {
		if c.ok {
			n++
		}
	}
	return n
}

// perCall returns the backend requests per call offered.
func (r result) perCall() float64 { return float64(r.requests) / float64(len(r.calls)) }

// latencies returns the durations of the calls that succeeded (ok) or
// failed, sorted.
func (r result) latencies(ok bool) []time.Duration {
	var d []time.Duration
	for _, c := range r.calls {
		if c.ok == ok {
			d = append(d, c.end-c.start)
		}
	}
	slices.Sort(d)
	return d
}

// failedHealthy returns how many calls failed that started and ended while
// the backend was healthy and had the capacity for them.
func (r result) failedHealthy() int {
	n := 0
	for _, c := range r.calls {
		if !c.ok && r.sc.healthyThrough(c.start, c.end) {
			n++
		}
	}
	return n
}

// goodput returns, per bucket, the share of the calls started in it that
// succeeded. A call that started after the run's last bucket, late in real
// time, counts in the last, where it was due.
func (r result) goodput() []float64 {
	offered := make([]int, r.sc.until/bucket)
	ok := make([]int, len(offered))
	for _, c := range r.calls {
		i := min(int(c.start/bucket), len(offered)-1)
		offered[i]++
		if c.ok {
			ok[i]++
		}
	}
	g := make([]float64, len(offered))
	for i := range g {
		g[i] = float64(ok[i]) / float64(max(offered[i], 1))
	}
	return g
}

// goodputShare is the goodput that counts as back.
const goodputShare = 0.95

// back returns how long after the backend was healthy again the goodput
// reached goodputShare, and stayed there to the end of the run; false if
// it did not, or if the scenario has no recovery.
func (r result) back() (time.Duration, bool) {
	if r.sc.recovered == 0 {
		return 0, false
	}
	g := r.goodput()
	from := int(r.sc.recovered / bucket)
	first := settledFrom(from, len(g), func(i int) bool { return g[i] >= goodputShare })
	return time.Duration(first-from) * bucket, first >= 0
}

func (r result) backString() string {
	if r.sc.recovered == 0 {
		return "-"
	}
	if d, ok := r.back(); ok {
		return d.String()
	}
	return "never"
}

// ms formats a latency in milliseconds, "-" for none.
func ms(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "-"
	}
	v := percentile(d, p)
	if v >= 10*time.Second {
		return v.Round(time.Second).String()
	}
	return fmt.Sprintf("%d", v.Round(time.Millisecond).Milliseconds())
}

// printScenario writes sc's table and how the pipelines meet the goals.
func printScenario(w io.Writer, sc *scenario, results []result) {
	fmt.Fprintf(w, "%s. %s\n", sc.name, sc.about)
	fmt.Fprintf(w, "%d calls a second until %v, each with a deadline of %v; attempts time out after %v where the strategy sets it.\n\n",
		sc.rate, sc.until, sc.deadline, sc.attemptTimeout)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tcalls ok\trequests/call\tok p50\tok p99\tfailed p50\tfailed p99\tfailed healthy\tback to 95%\t")
	for _, r := range results {
		okd, failed := r.latencies(true), r.latencies(false)
		fmt.Fprintf(tw, "%s\t%d (%.1f%%)\t%.2f\t%s\t%s\t%s\t%s\t%d\t%s\t\n", r.strategy, r.ok(),
			100*float64(r.ok())/float64(len(r.calls)), r.perCall(), ms(okd, 0.5), ms(okd, 0.99),
			ms(failed, 0.5), ms(failed, 0.99), r.failedHealthy(), r.backString())
	}
	tw.Flush()
	fmt.Fprintln(w)
	printGoals(w, results)
}

// goal is one of issue #24's goals for a pipeline in one scenario.
type goal struct {
	what, target string
	value        string
	met          bool
}

// goals returns how the strategy named name meets the goals in results.
func goals(results []result, name string) []goal {
	var me result
	var bestOther, bestPlain *result
	for i, r := range results {
		switch {
		case r.strategy == name:
			me = r
			continue
		case bestOther == nil || r.ok() > bestOther.ok():
			bestOther = &results[i]
		}
		if slices.Contains(plainRetries, r.strategy) &&
			(bestPlain == nil || r.ok() > bestPlain.ok() || r.ok() == bestPlain.ok() && r.requests < bestPlain.requests) {
			bestPlain = &results[i]
		}
	}
	if bestOther == nil || bestPlain == nil {
		return nil // nothing to compare with
	}
	sc := me.sc
	share := float64(me.ok()) / float64(max(bestOther.ok(), 1))
	load := float64(me.requests) / float64(max(bestPlain.requests, 1))
	limit := 1.1
	if sc.heavy {
		limit = 0.5
	}
	g := []goal{
		{fmt.Sprintf("calls ok / best other's (%s)", bestOther.strategy), ">= 98%",
			fmt.Sprintf("%.1f%%", 100*share), share >= 0.98},
		{fmt.Sprintf("backend requests / best plain retry's (%s)", bestPlain.strategy), fmt.Sprintf("<= %.1fx", limit),
			fmt.Sprintf("%.2fx", load), load <= limit},
		{"calls failed while healthy", "0", fmt.Sprint(me.failedHealthy()), me.failedHealthy() == 0},
	}
	if sc.recovered > 0 {
		d, ok := me.back()
		g = append(g, goal{"goodput back above 95% after healthy", "<= 200ms", me.backString(), ok && d <= 200*time.Millisecond})
	}
	return g
}

// goalNames are the strategies whose goals the tables show.
var goalNames = []string{defaultsName, recommendedName}

func printGoals(w io.Writer, results []result) {
	var names []string
	var all [][]goal
	for _, n := range goalNames {
		if !slices.ContainsFunc(results, func(r result) bool { return r.strategy == n }) {
			continue
		}
		if g := goals(results, n); g != nil {
			names, all = append(names, n), append(all, g)
		}
	}
	if len(names) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "goal\ttarget\t%s\t\n", strings.Join(names, "\t"))
	for j := range all[0] {
		what := all[0][j].what
		fmt.Fprintf(tw, "%s\t%s", what, all[0][j].target)
		for i := range names {
			g := all[i][j]
			met := "no"
			if g.met {
				met = "met"
			}
			fmt.Fprintf(tw, "\t%s %s", g.value, met)
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
}

// legend explains the columns.
const legend = `  calls ok         calls that succeeded within the caller's deadline (and their share of those offered)
  requests/call    requests the backend received, retries included, per call offered
  ok p50, ok p99   how long the calls that succeeded took, in ms (median, 99th percentile)
  failed p50, p99  the same for the calls that failed ("-": none did)
  failed healthy   calls that failed though the backend was healthy, with capacity to spare,
                   from their start to their end
  back to 95%      how long after the backend was healthy again the calls started per 100 ms
                   succeeded at 95% or more, to the end of the run ("never": not in the run;
                   "-": the scenario has no recovery)
`
