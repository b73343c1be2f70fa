package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Small scenarios whose right answers are known, run through the harness in
// virtual time, and checked against what it computes and prints.

func review166Scenario() *scenario {
	return &scenario{
		key: "review166", name: "review166", about: "known answers",
		rate: 100, until: time.Second, hosts: 1, workers: 64, queue: 1000,
		service:  func(*rand.Rand) time.Duration { return 10 * time.Millisecond },
		healthy:  []span{{0, 300 * time.Millisecond}, {600 * time.Millisecond, forever}},
		down:     between(300*time.Millisecond, 600*time.Millisecond),
		deadline: time.Second, attemptTimeout: 250 * time.Millisecond,
		recovered: 600 * time.Millisecond,
	}
}

func review166Strategy(name string, f func(ctx context.Context, c *call) error) strategy {
	return strategy{name: name, build: func(*scenario) caller { return f }}
}

// TestReview166LateSuccessIsNotOK: a caller that ignores its context and
// returns nil 1.5 s after it started did not succeed within the deadline;
// one that returns nil at 999 ms did.
func TestReview166LateSuccessIsNotOK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := review166Scenario()
		sc.down, sc.healthy = nil, []span{{0, forever}}
		late := review166Strategy("late", func(ctx context.Context, c *call) error {
			if c.id%2 == 0 {
				time.Sleep(1500 * time.Millisecond)
			} else {
				time.Sleep(999 * time.Millisecond)
			}
			return nil
		})
		r := runScenario(sc, []strategy{late}, 1)[0]
		if got, want := r.ok(), 50; got != want {
			t.Errorf("calls ok = %d, want %d (the odd calls)", got, want)
		}
		if got := r.failedHealthy(); got != 50 {
			t.Errorf("failed healthy = %d, want 50", got)
		}
		if got := ms(r.latencies(false), 0.5); got != "1500" {
			t.Errorf("failed p50 = %s, want 1500", got)
		}
	})
}

// TestReview166OutageCounts: no retry against an outage from 300 ms to
// 600 ms, 100 calls a second for 1 s. The calls whose request arrives
// (start + 1 ms) in [300, 600) ms fail: those started at 300..590 ms, 30;
// the call started at 290 ms arrives at 291: served. Every failure
// straddles nothing: it starts and ends inside the outage, so none failed
// while healthy; requests per call 1.00; the goodput per 100 ms is 1 but
// in buckets 3, 4, 5; back to 95% at once (0s).
func TestReview166OutageCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := review166Scenario()
		r := runScenario(sc, []strategy{strategies[0]}, 1)[0]
		if got := r.ok(); got != 70 {
			t.Errorf("ok = %d, want 70", got)
		}
		if got := r.requests; got != 100 {
			t.Errorf("requests = %d, want 100", got)
		}
		if got := r.failedHealthy(); got != 0 {
			t.Errorf("failed healthy = %d, want 0", got)
		}
		g := r.goodput()
		for i, v := range g {
			want := 1.0
			if i >= 3 && i < 6 {
				want = 0
			}
			if v != want {
				t.Errorf("goodput[%d] = %v, want %v", i, v, want)
			}
		}
		if d, ok := r.back(); !ok || d != 0 {
			t.Errorf("back = %v %v, want 0s true", d, ok)
		}
		if got := ms(r.latencies(true), 0.99); got != "11" {
			t.Errorf("ok p99 = %s, want 11", got)
		}
		if got := ms(r.latencies(false), 0.5); got != "1" {
			t.Errorf("failed p50 = %s, want 1", got)
		}
		var b bytes.Buffer
		printScenario(&b, sc, []result{r})
		if !strings.Contains(b.String(), "70 (70.0%)") {
			t.Errorf("table lacks 70 (70.0%%):\n%s", b.String())
		}
	})
}

// TestReview166FailedStraddlingHealthIsNotCounted: a call that starts in
// the outage and fails after it ended, and one that starts healthy and
// fails in the outage, are not "failed while healthy"; one that starts and
// fails inside the healthy span is.
func TestReview166FailedStraddlingHealthIsNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := review166Scenario()
		s := review166Strategy("straddle", func(ctx context.Context, c *call) error {
			switch c.id {
			case 25: // starts at 250 ms (healthy), fails at 350 ms (outage)
				time.Sleep(100 * time.Millisecond)
				return errors.New("x")
			case 55: // starts at 550 ms (outage), fails at 650 ms (healthy)
				time.Sleep(100 * time.Millisecond)
				return errors.New("x")
			case 80: // starts at 800 ms, fails at 810 ms: healthy throughout
				time.Sleep(10 * time.Millisecond)
				return errors.New("x")
			case 29: // starts at 290 ms, fails at exactly 300 ms: the outage's first instant
				time.Sleep(10 * time.Millisecond)
				return errors.New("x")
			case 59: // starts at 590, fails at 600: starts in the outage
				time.Sleep(10 * time.Millisecond)
				return errors.New("x")
			}
			return nil
		})
		r := runScenario(sc, []strategy{s}, 1)[0]
		if got := r.failedHealthy(); got != 1 {
			t.Errorf("failed healthy = %d, want 1 (call 80 only)", got)
		}
		if got := r.ok(); got != 95 {
			t.Errorf("ok = %d, want 95", got)
		}
	})
}

// TestReview166BucketEdges: the requests per bucket count a request at
// exactly 100 ms in the second bucket, and the total is every request.
func TestReview166BucketEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCounter(time.Now())
		time.Sleep(99 * time.Millisecond)
		c.add(time.Now())
		time.Sleep(time.Millisecond)
		c.add(time.Now()) // exactly 100 ms
		time.Sleep(250 * time.Millisecond)
		c.add(time.Now())
		n := c.counts()
		if len(n) != 4 || n[0] != 1 || n[1] != 1 || n[2] != 0 || n[3] != 1 {
			t.Errorf("counts = %v, want [1 1 0 1]", n)
		}
		if got := sum(n, 0, time.Duration(len(n))*bucket); got != 3 {
			t.Errorf("sum = %d, want 3", got)
		}
	})
}

// TestReview166PercentileIsNotBelowTheShareAsked: the p99 of the calls
// that failed is a duration that 99% of them took at most. With two
// failures, one of 1 ms and one of 1 s, a p99 of 1 ms says that 99% of
// the failures took 1 ms or less, when half took 1 s. Nearest rank
// (ceil(p*n)) gives 1000.
func TestReview166PercentileIsNotBelowTheShareAsked(t *testing.T) {
	cases := []struct {
		d    []time.Duration
		p    float64
		want string
	}{
		{[]time.Duration{time.Millisecond, time.Second}, 0.99, "1000"},
		{func() []time.Duration {
			var d []time.Duration
			for i := 1; i <= 50; i++ {
				d = append(d, time.Duration(i)*time.Millisecond)
			}
			return d
		}(), 0.99, "50"},
	}
	for _, c := range cases {
		got := ms(c.d, c.p)
		below := 0
		for _, d := range c.d {
			if d.Milliseconds() <= int64(mustAtoi(got)) {
				below++
			}
		}
		if float64(below) < c.p*float64(len(c.d)) {
			t.Errorf("p%.0f of %d durations (max %v) = %s ms: only %d of %d took that long or less (want %s)",
				100*c.p, len(c.d), c.d[len(c.d)-1], got, below, len(c.d), c.want)
		}
	}
}

func mustAtoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}
