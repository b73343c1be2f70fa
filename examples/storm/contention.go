package main

import (
	"container/heap"
	"fmt"
	"io"
	"iter"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const (
	contentionRuns = 20
	// hold is how long a successful attempt holds the contended resource.
	hold = time.Millisecond
)

// contended is a jitter mode's mean over runs of the contention simulation.
type contended struct {
	name  string
	calls float64
	time  time.Duration
}

var contentionModes = []struct {
	name string
	mode retrypolicy.JitterMode
}{
	{"exponential, no jitter", retrypolicy.None},
	{"full jitter", retrypolicy.Full},
	{"equal jitter", retrypolicy.Equal},
	{"decorrelated jitter", retrypolicy.Decorrelated},
}

func runContention(clients, runs int) []contended {
	var out []contended
	for _, m := range contentionModes {
		p := retrypolicy.New(retrypolicy.Jitter(m.mode), retrypolicy.BaseDelay(5*time.Millisecond), retrypolicy.MaxDelay(2*time.Second))
		var calls int
		var total time.Duration
		for range runs {
			c, d := contend(p, clients)
			calls += c
			total += d
		}
		out = append(out, contended{m.name, float64(calls) / float64(runs), total / time.Duration(runs)})
	}
	return out
}

// contend simulates clients that all try to write one resource at time 0,
// in virtual time: an attempt succeeds if the resource is free, holding it
// for a moment; the others fail and retry after the policy's delays. It
// returns the attempts made and when the last client succeeded.
func contend(p *retrypolicy.Policy, clients int) (calls int, done time.Duration) {
	q := make(attempts, clients)
	stops := make([]func(), clients)
	for i := range q {
		next, stop := iter.Pull(p.Delays())
		stops[i] = stop
		q[i] = attempt{at: 0, client: i, next: next}
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	heap.Init(&q)
	var busyUntil time.Duration
	for q.Len() > 0 {
		a := heap.Pop(&q).(attempt)
		calls++
		if a.at >= busyUntil {
			busyUntil = a.at + hold
			done = a.at + hold
			continue
		}
		d, _ := a.next()
		a.at += d
		heap.Push(&q, a)
	}
	return calls, done
}

type attempt struct {
	at     time.Duration
	client int
	next   func() (time.Duration, bool)
}

// attempts is a min-heap by time, then client.
type attempts []attempt

func (q attempts) Len() int { return len(q) }
func (q attempts) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].client < q[j].client
}
func (q attempts) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *attempts) Push(x any)   { *q = append(*q, x.(attempt)) }
func (q *attempts) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

func printContention(w io.Writer, results []contended) {
	base := results[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tcalls\tcalls / no jitter\tall done after\ttime / no jitter\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%v\t%.3f\t\n", r.name, r.calls, r.calls/base.calls,
			r.time.Round(time.Millisecond), float64(r.time)/float64(base.time))
	}
	tw.Flush()
}
