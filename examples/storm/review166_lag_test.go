package main

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The real-time harness promises to measure "how late each call started
// against its schedule" and not to report a run whose lag is over maxLag
// (p99) or maxLagPeak (worst). The figures are computed from outcome.start,
// the instant the call's goroutine read the clock; the lag from late[i],
// read by the dispatching loop before it spawned that goroutine. These
// tests make the process busy and check that a run behind() accepts did
// have its calls start on time, by the very timestamps the table uses.

// review166Quick is a healthy backend, more than fast enough: a call's
// outcome is decided by the harness alone.
func review166Quick() *scenario {
	return &scenario{
		key: "review166", name: "review166", about: "healthy",
		rate: 400, until: 1500 * time.Millisecond, hosts: 1, workers: 16, queue: 1000,
		service:  func(*rand.Rand) time.Duration { return time.Millisecond },
		healthy:  []span{{0, forever}},
		deadline: time.Second, attemptTimeout: 250 * time.Millisecond,
	}
}

// actualLag returns the p99 and worst of how late each call of r started
// (outcome.start) against its schedule.
func actualLag(r result) (p99, peak time.Duration) {
	l := make([]time.Duration, len(r.calls))
	for i, c := range r.calls {
		l[i] = c.start - time.Duration(i)*time.Second/time.Duration(r.sc.rate)
	}
	slices.Sort(l)
	return percentile(l, 0.99), l[len(l)-1]
}

func review166RunBusy(t *testing.T, procs, hogs int, strategiesN int) (accepted bool, why string, realP99, realPeak time.Duration) {
	prev := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(prev)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range hogs {
		wg.Go(func() {
			x := 0
			for !stop.Load() {
				for i := range 1000 {
					x += i
				}
			}
			_ = x
		})
	}
	ss := slices.Repeat([]strategy{strategies[0]}, strategiesN)
	results := runScenario(review166Quick(), ss, 1)
	stop.Store(true)
	wg.Wait()
	late, why := behind(results, 0)
	for _, r := range results {
		p, m := actualLag(r)
		realP99, realPeak = max(realP99, p), max(realPeak, m)
	}
	return !late, why, realP99, realPeak
}

// TestReview166AcceptedRunStartedOnTime: under CPU hogs, whenever behind()
// accepts a run, the calls' own start times were within the limits.
func TestReview166AcceptedRunStartedOnTime(t *testing.T) {
	if raceEnabled {
		t.Skip("real-time runs with busy goroutines, or processes of the demo: .ci/run runs this package without the race detector too")
	}
	for _, c := range []struct{ procs, hogs, strategies int }{
		{1, 0, 1}, {1, 2, 1}, {2, 4, 2}, {1, 4, 3}, {2, 8, 4},
	} {
		ok, why, p99, peak := review166RunBusy(t, c.procs, c.hogs, c.strategies)
		t.Logf("GOMAXPROCS=%d hogs=%d strategies=%d: accepted=%v (%s); start lag by outcome.start: p99 %v, worst %v",
			c.procs, c.hogs, c.strategies, ok, why, p99, peak)
		if ok && (p99 > maxLag || peak > maxLagPeak) {
			t.Errorf("GOMAXPROCS=%d hogs=%d: run accepted, but its calls started late by %v at the p99, %v at worst (limits %v, %v)",
				c.procs, c.hogs, p99, peak, maxLag, maxLagPeak)
		}
	}
}

// TestReview166LateDispatchIsRefused: a dispatcher stalled once for 30 ms
// (a GC pause, a descheduled thread) must make the run refused.
func TestReview166LateDispatchIsRefused(t *testing.T) {
	if raceEnabled {
		t.Skip("real-time runs with busy goroutines, or processes of the demo: .ci/run runs this package without the race detector too")
	}
	sc := review166Quick()
	sc.until = 500 * time.Millisecond
	stall := strategy{name: "stall", build: func(*scenario) caller {
		var once sync.Once
		return func(ctx context.Context, c *call) error {
			if c.id == 50 {
				// hold every P for 30 ms: stop the world as a GC would
				once.Do(func() {
					prev := runtime.GOMAXPROCS(1)
					end := time.Now().Add(30 * time.Millisecond)
					for time.Now().Before(end) {
					}
					runtime.GOMAXPROCS(prev)
				})
			}
			_, err := c.attempt(ctx)
			return err
		}
	}}
	results := runScenario(sc, []strategy{stall}, 1)
	late, why := behind(results, 0)
	p99, peak := actualLag(results[0])
	t.Logf("behind=%v (%s); by outcome.start: p99 %v, worst %v", late, why, p99, peak)
	if !late && peak > maxLagPeak {
		t.Errorf("a call started %v late, and the run was accepted", peak)
	}
}

// TestReview166MaxShortAcceptedRunHadNoCallABucketLate: with -maxshort, a
// run is refused "if a call started a bucket late or more". behind()
// checks the dispatcher's late[i]; the tables use outcome.start, read by
// the call's goroutine once it runs. Under CPU load the goroutine runs
// well after the dispatcher spawned it, so a call can start (by the
// table's clock) over 100 ms late in a run that behind() accepts.
func TestReview166MaxShortAcceptedRunHadNoCallABucketLate(t *testing.T) {
	if raceEnabled {
		t.Skip("real-time runs with busy goroutines, or processes of the demo: .ci/run runs this package without the race detector too")
	}
	bad := 0
	for _, c := range []struct{ procs, hogs, strategies int }{
		{1, 3, 2}, {1, 4, 2}, {1, 3, 3}, {2, 6, 3}, {1, 5, 2},
	} {
		prev := runtime.GOMAXPROCS(c.procs)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range c.hogs {
			wg.Go(func() {
				x := 0
				for !stop.Load() {
					for i := range 1000 {
						x += i
					}
				}
				_ = x
			})
		}
		sc := review166Quick()
		sc.until = 2 * time.Second
		results := runScenario(sc, slices.Repeat([]strategy{strategies[0]}, c.strategies), 1)
		stop.Store(true)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
		late, why := behind(results, 0.05)
		var peak time.Duration
		for _, r := range results {
			_, m := actualLag(r)
			peak = max(peak, m)
		}
		t.Logf("GOMAXPROCS=%d hogs=%d strategies=%d: refused=%v (%s); latest start by outcome.start %v", c.procs, c.hogs, c.strategies, late, why, peak)
		if !late && peak >= bucket {
			bad++
			t.Errorf("GOMAXPROCS=%d hogs=%d strategies=%d: accepted with -maxshort 0.05, but a call started %v late (>= %v)", c.procs, c.hogs, c.strategies, peak, bucket)
		}
	}
}
