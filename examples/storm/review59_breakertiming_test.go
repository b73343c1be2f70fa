package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// breakerLog runs sc with the defaults' pipeline whose breaker reports its
// state changes, and returns them with their time from the run's start.
func breakerLog(t *testing.T, sc *scenario, withTimeout bool) ([]string, time.Duration, result) {
	var mu sync.Mutex
	var changes []string
	var firstOpen time.Duration
	var start time.Time
	var res []result
	synctest.Test(t, func(*testing.T) {
		start = time.Now()
		l := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind != resilience.EventStateChange {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			at := time.Since(start)
			if e.To == resilience.StateOpen && firstOpen == 0 && at > time.Second {
				firstOpen = at
			}
			if len(changes) < 12 || at > 2900*time.Millisecond && len(changes) < 400 {
				changes = append(changes, fmt.Sprintf("%v %v->%v", at, e.From, e.To))
			}
		})
		s := pipelineStrategy("review59", func(sc *scenario, retry newRetry) []pipeline.Option {
			o := defaultsWith(breaker.WithListener(l))(sc, retry)
			if withTimeout {
				o = append(o, pipeline.WithAttemptTimeout(sc.attemptTimeout))
			}
			return o
		})
		res = runScenario(sc, []strategy{s}, 1)
	})
	return changes, firstOpen, res[0]
}

// TestReview59BreakerOpensAQuarterSecondIn: in the outage, the defaults'
// breaker opens about a quarter of a second in (its third bucket), not
// at once: it counts one outcome per call, and the first calls to fail
// end only after their retries' delays. The requests sent before it
// opens are most of the Pipeline's load in the outage; after, it probes
// up to 10 times a second (docs/storm.md, Full outage).
func TestReview59BreakerOpensAQuarterSecondIn(t *testing.T) {
	changes, first, r := breakerLog(t, scenarioByKey("outage"), true)
	t.Logf("ok %d, req/call %.2f; state changes: %v", r.ok(), r.perCall(), changes)
	if first < time.Second+2*bucket || first >= time.Second+3*bucket {
		t.Errorf("the breaker first opened at %v, %v into the outage: not in its third bucket", first, first-time.Second)
	}
	opened := time.Second + 3*bucket // the end of the bucket it opened in
	before, after := sum(r.load, time.Second, opened), sum(r.load, opened, 6*time.Second)
	t.Logf("requests in the outage: %d up to the bucket the breaker opened in, %d after", before, after)
	if before <= 2*after {
		t.Errorf("requests in the outage: %d up to the bucket the breaker opened in, %d after", before, after)
	}
	if rate := float64(after) / (6*time.Second - opened).Seconds(); rate > 10.5 {
		t.Errorf("%.1f requests a second to a dead dependency once the breaker opened: up to 10", rate)
	}
}

// TestReview59SlowRecoveryBreaker logs the breaker's changes in the slow
// recovery from 3 s, with and without the attempt timeout, and the calls
// failed while healthy: without it (the defaults row), the breaker
// does not open again once it closed in the ramp.
func TestReview59SlowRecoveryBreaker(t *testing.T) {
	for _, withTimeout := range []bool{true, false} {
		changes, _, r := breakerLog(t, scenarioByKey("slowrecovery"), withTimeout)
		var late []string
		for _, c := range changes {
			if c[0] >= '3' && c[1] == '.' || len(c) > 2 && c[:2] != "1." && c[:2] != "2." {
				late = append(late, c)
			}
		}
		t.Logf("attempt timeout %v: ok %d req/call %.3f failed healthy %d", withTimeout, r.ok(), r.perCall(), r.failedHealthy())
		for _, c := range late {
			t.Logf("   %s", c)
		}
		openAfter := false // the breaker opened again after it closed in the ramp
		for i, c := range late {
			if i > 0 && strings.Contains(c, "closed->open") {
				openAfter = true
			}
		}
		for _, c := range r.calls {
			if !c.ok && r.sc.healthyThrough(c.start, c.end) {
				t.Logf("   failed healthy: started %v ended %v", c.start, c.end)
				if !withTimeout && openAfter {
					t.Errorf("docs/storm.md: the recommended row's breaker stays closed once it closed in the ramp, and its call failed while healthy met 503s from the backlog's queue")
				}
			}
		}
	}
}
