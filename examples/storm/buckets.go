package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// bucket is the width of every per-time count: the load, the offered calls
// and the goodput are all counted per 100 ms.
const bucket = 100 * time.Millisecond

// counter counts events per bucket from its start. It is safe for
// concurrent use.
type counter struct {
	start time.Time
	mu    sync.Mutex
	n     []int
}

func newCounter(start time.Time) *counter { return &counter{start: start} }

// add counts one event at now.
func (c *counter) add(now time.Time) {
	i := max(int(now.Sub(c.start)/bucket), 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.n) <= i {
		c.n = append(c.n, 0)
	}
	c.n[i]++
}

// counts returns the events per bucket, oldest first.
func (c *counter) counts() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.n)
}

// set replaces the counts with n, events per bucket, oldest first.
func (c *counter) set(n []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = slices.Clone(n)
}

// at returns s[i], or 0 past its end.
func at(s []int, i int) int {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// sum returns the total of s over the buckets that start in [from, to).
func sum(s []int, from, to time.Duration) int {
	n := 0
	for i := int(from / bucket); i < int(to/bucket); i++ {
		n += at(s, i)
	}
	return n
}

// settledFrom returns the first bucket in [from, to) from which good holds
// for every bucket to to, or -1 if good does not hold for the last one.
func settledFrom(from, to int, good func(i int) bool) int {
	first := -1
	for i := from; i < to; i++ {
		switch {
		case !good(i):
			first = -1
		case first < 0:
			first = i
		}
	}
	return first
}

// percentile returns the p-th percentile of sorted durations by nearest
// rank, as the registry's: the least value with at least a share p of
// them at or below it (the p99 of two is the larger; review166).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[max(int(math.Ceil(p*float64(len(sorted))))-1, 0)]
}
