package main

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestServiceFollowsTheSpeed: a request goes at the workers' speed of
// each moment it is served, not at the speed of the moment it started.
func TestServiceFollowsTheSpeed(t *testing.T) {
	slow, meta := scenarioByKey("slowrecovery"), scenarioByKey("metastable")
	for _, c := range []struct {
		sc       *scenario
		at, work time.Duration
		want     time.Duration
		why      string
	}{
		{slow, 0, 10 * time.Millisecond, 10 * time.Millisecond, "full speed"},
		{slow, 2 * time.Second, 10 * time.Millisecond, 10 * time.Millisecond, "down, but at full speed"},
		// 5 ms of work in the first 100 ms at 5%, the other 5 ms by
		// 3.1732 s, when the speed's integral from 3.1 s, (t-3)^2/4 - 0.0025,
		// reaches 0.005: 173 ms, not the 200 ms of 5% all along.
		{slow, 3 * time.Second, 10 * time.Millisecond, 173 * time.Millisecond, "the ramp's start"},
		{slow, 5 * time.Second, 10 * time.Millisecond, 10 * time.Millisecond, "after the ramp"},
		// 1 ms at half speed, then 9.5 ms at full speed.
		{meta, 4*time.Second - time.Millisecond, 10 * time.Millisecond, 10500 * time.Microsecond, "the dip's end"},
		{meta, 2*time.Second - time.Millisecond, 10 * time.Millisecond, 19 * time.Millisecond, "the dip's start"},
	} {
		got := c.sc.serviceFrom(c.at, c.work)
		assert.InDelta(t, float64(c.want), float64(got), float64(time.Millisecond), "%s: %v of work from %v", c.why, c.work, c.at)
	}
}

// seedSpread is the widest that the figures of a strategy's row may
// spread across seeds, (largest - smallest) / smallest: issue #24's bound
// for three real-time runs, whose timing the seeds stand in for.
const seedSpread = 0.10

// TestSlowRecoveryAgreesAcrossSeeds: in the slow recovery, the calls ok
// and requests per call of the Pipeline's defaults and recommended rows,
// over 20 seeds, are within seedSpread of each other. The moment its
// breaker closes, on probes served while the capacity comes back, decides
// the load of the ramp; when the probe went at the speed of the moment it
// started, it spread that load 16.6%, the calls sent in the ramp 1.5 to
// 2.5 requests each; with the breaker's former defaults (5 failures in a
// row, 1 probe), the defaults' row spread 19.0%, the flood after the
// breaker closed opening it again in some seeds. With -v, it logs the
// smallest, median and largest figures, of grpc-go's row too, for
// reference.
func TestSlowRecoveryAgreesAcrossSeeds(t *testing.T) {
	if raceEnabled {
		t.Skip("20 runs take minutes under the race detector")
	}
	sc := scenarioByKey("slowrecovery")
	var run []strategy
	for _, name := range []string{grpcName, defaultsName, recommendedName} {
		s, _ := strategyByName(name)
		run = append(run, s)
	}
	ok := make([][]float64, len(run))
	perCall := make([][]float64, len(run))
	for seed := uint64(1); seed <= 20; seed++ {
		var r []result
		synctest.Test(t, func(*testing.T) { r = runScenario(sc, run, seed) })
		for i := range run {
			ok[i] = append(ok[i], float64(r[i].ok()))
			perCall[i] = append(perCall[i], r[i].perCall())
		}
	}
	for i, s := range run {
		for _, f := range []struct {
			what, format string
			v            []float64
		}{{"calls ok", "%.0f", ok[i]}, {"requests per call", "%.3f", perCall[i]}} {
			slices.Sort(f.v)
			lo, med, hi := f.v[0], f.v[len(f.v)/2], f.v[len(f.v)-1]
			t.Logf("%s, %s: "+f.format+" to "+f.format+", median "+f.format+": %.1f%% apart", s.name, f.what, lo, hi, med, 100*(hi-lo)/lo)
			if s.name != grpcName {
				assert.LessOrEqual(t, hi, (1+seedSpread)*lo, "%s, %s across seeds", s.name, f.what)
			}
		}
	}
}

// TestSlowRecoveryDoesNotHingeOnTheProbesTiming: the slow recovery with
// the backend back at each of 16 moments over a probe's period (3 s, then
// every 7.5 ms to 3.1125 s), which is what moves from one real-time run to
// the next: the breaker's probe comes every 100 ms and a call, and a few
// milliseconds of lag over the 20 probes of the outage move it against the
// moment the backend is back. With the defaults (10 failures in a row,
// 5 good probes to close), the breaker, once closed, never opens again in
// the ramp, and the requests per call stay within seedSpread. With the
// former defaults (5 failures in a row, 1 probe), it opened again at some
// of these moments and not at others: a run of 5 failed calls among the
// ramp's tenth that fail came by chance in the flood after a probe closed
// the breaker as early as 130 ms into the ramp.
func TestSlowRecoveryDoesNotHingeOnTheProbesTiming(t *testing.T) {
	if raceEnabled {
		t.Skip("32 runs take minutes under the race detector")
	}
	for _, c := range []struct {
		name   string
		opts   []breaker.Option
		stable bool
	}{
		{defaultsName, nil, true},
		{formerName, []breaker.Option{breaker.ConsecutiveFailures(formerConsecutive), breaker.HalfOpenRequests(1)}, false},
	} {
		var perCall []float64
		reopened := 0
		for i := range 16 {
			back := 3*time.Second + time.Duration(i)*7500*time.Microsecond
			sc := *scenarioByKey("slowrecovery")
			sc.down = between(time.Second, back)
			sc.speed = func(t time.Duration) float64 { return slowSpeed(t - back + 3*time.Second) }
			var opened atomic.Int32
			var r []result
			synctest.Test(t, func(*testing.T) {
				start := time.Now()
				l := resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventStateChange && e.From == resilience.StateClosed && e.To == resilience.StateOpen && time.Since(start) > back {
						opened.Add(1)
					}
				})
				s := pipelineStrategy(c.name, func(sc *scenario, retry newRetry) []pipeline.Option {
					return []pipeline.Option{pipeline.WithBreaker(breaker.New("backend", append(c.opts, breaker.WithListener(l))...)),
						pipeline.WithRetry(retry()), pipeline.WithAttemptTimeout(sc.attemptTimeout)}
				})
				r = runScenario(&sc, []strategy{s}, 1)
			})
			perCall = append(perCall, r[0].perCall())
			if opened.Load() > 0 {
				reopened++
			}
		}
		slices.Sort(perCall)
		lo, hi := perCall[0], perCall[len(perCall)-1]
		t.Logf("%s: opened again in the ramp at %d of 16 moments; requests per call %.3f to %.3f (%.1f%% apart)", c.name, reopened, lo, hi, 100*(hi-lo)/lo)
		if c.stable {
			assert.Zero(t, reopened, "%s: opened again in the ramp", c.name)
			assert.LessOrEqual(t, hi, (1+seedSpread)*lo, "%s: requests per call across the moments", c.name)
		} else {
			assert.NotZero(t, reopened, "%s: the former defaults opened again at some moments", c.name)
			assert.Less(t, reopened, 16, "%s: and not at others", c.name)
		}
	}
}
