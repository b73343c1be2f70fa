package main

import (
	"container/heap"
	"fmt"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Marc Brooker's simulation ("Exponential Backoff And Jitter", AWS
// Architecture Blog, 2015, and its simulator, aws-samples/
// aws-arch-backoff-simulator): clients update one row under optimistic
// concurrency. Each reads the row's version, then writes back conditioned
// on it; a write with a stale version loses, and its client backs off and
// starts again with a read. Every message crosses a network whose delay is
// normal with a mean of 10 ms and a standard deviation of 2 ms (its
// absolute value), as in his simulator. All clients start at once.
const (
	contentionRuns = 100 // runs averaged per figure, as in his simulator
	netMean        = 10 * time.Millisecond
	netSD          = 2 * time.Millisecond
)

// contentionCounts are the numbers of clients simulated.
var contentionCounts = []int{10, 50, 100, 200}

// contentionStrategies are Brooker's backoffs with his base (5 ms) and cap
// (2 s). His n-th retry waits up to 2^n * base, from n = 1, so his first
// retry's cap is 10 ms: our BaseDelay. His decorrelated jitter starts from
// his base, 5 ms.
var contentionStrategies = []struct {
	name   string
	policy *retrypolicy.Policy
}{
	{"no backoff", retrypolicy.New(retrypolicy.BaseDelay(0))},
	{"exponential, no jitter", contentionPolicy(retrypolicy.None, 10*time.Millisecond)},
	{"full jitter", contentionPolicy(retrypolicy.Full, 10*time.Millisecond)},
	{"equal jitter", contentionPolicy(retrypolicy.Equal, 10*time.Millisecond)},
	{"decorrelated jitter", contentionPolicy(retrypolicy.Decorrelated, 5*time.Millisecond)},
}

func contentionPolicy(m retrypolicy.JitterMode, base time.Duration) *retrypolicy.Policy {
	return retrypolicy.New(retrypolicy.Jitter(m), retrypolicy.BaseDelay(base), retrypolicy.MaxDelay(2*time.Second))
}

// contended is one strategy's mean over runs at one number of clients.
type contended struct {
	name    string
	clients int
	calls   float64 // writes, as Brooker counts them
	time    time.Duration
}

// runContention simulates every strategy at every count of clients, runs
// times each, and returns the means by strategy, then count.
func runContention(counts []int, runs int) []contended {
	var out []contended
	for _, s := range contentionStrategies {
		for _, n := range counts {
			var calls int
			var total time.Duration
			for range runs {
				c, d := contend(s.policy, n)
				calls += c
				total += d
			}
			out = append(out, contended{s.name, n, float64(calls) / float64(runs), total / time.Duration(runs)})
		}
	}
	return out
}

// kind is what a message carries.
type kind uint8

const (
	read       kind = iota // to the server
	readReply              // the version, to the client
	write                  // the version read, to the server
	writeReply             // whether the write won, to the client
)

// message is one message in flight, arriving at at.
type message struct {
	at     time.Duration
	seq    int // the order sent, to break ties
	client int
	kind   kind
	value  int
}

// contend runs one simulation of clients updating the row once each, with
// discrete events in virtual time. It returns the writes made and when the
// last client learned that its write won.
func contend(p *retrypolicy.Policy, clients int) (calls int, done time.Duration) {
	delays := make([]func() (time.Duration, bool), clients)
	for i := range delays {
		next, stop := iter.Pull(p.Delays())
		defer stop()
		delays[i] = next
	}
	var q messages
	seq := 0
	send := func(at time.Duration, client int, k kind, value int) {
		seq++
		heap.Push(&q, message{at: at + network(), seq: seq, client: client, kind: k, value: value})
	}
	for c := range clients {
		send(0, c, read, 0)
	}
	version := 0
	for q.Len() > 0 {
		m := heap.Pop(&q).(message)
		switch m.kind {
		case read:
			send(m.at, m.client, readReply, version)
		case readReply:
			send(m.at, m.client, write, m.value)
		case write:
			calls++
			won := 0
			if m.value == version {
				version++
				won = 1
			}
			send(m.at, m.client, writeReply, won)
		case writeReply:
			if m.value == 1 {
				done = m.at
				continue
			}
			d, _ := delays[m.client]()
			send(m.at+d, m.client, read, 0)
		}
	}
	return calls, done
}

// network draws a message's delay: |N(netMean, netSD)|.
func network() time.Duration {
	return time.Duration(math.Abs(float64(netMean) + rand.NormFloat64()*float64(netSD)))
}

// messages is a min-heap by arrival, then by the order sent.
type messages []message

func (q messages) Len() int { return len(q) }
func (q messages) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q messages) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *messages) Push(x any)   { *q = append(*q, x.(message)) }
func (q *messages) Pop() any {
	old := *q
	m := old[len(old)-1]
	*q = old[:len(old)-1]
	return m
}

// find returns the result of strategy name at clients.
func find(results []contended, name string, clients int) contended {
	for _, r := range results {
		if r.name == name && r.clients == clients {
			return r
		}
	}
	panic(fmt.Sprintf("storm: no contention result for %q at %d clients", name, clients))
}

// printContention prints, at each count of clients, every strategy's
// writes and completion time, and both as a ratio to full jitter's.
func printContention(w io.Writer, results []contended, counts []int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tstrategy\tcalls\tcalls / full jitter\tall done after\ttime / full jitter\t")
	for _, n := range counts {
		full := find(results, "full jitter", n)
		for _, s := range contentionStrategies {
			r := find(results, s.name, n)
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.2f\t%v\t%.2f\t\n", n, r.name, r.calls, r.calls/full.calls,
				r.time.Round(time.Millisecond), float64(r.time)/float64(full.time))
		}
	}
	tw.Flush()
	fmt.Fprint(w, `
  clients             how many clients write to one contended resource at once
  calls               writes sent, retries included, mean of the runs
  all done after      when the last client's write succeeded
  ... / full jitter   the figure over full jitter's at the same count of clients
`)
}
