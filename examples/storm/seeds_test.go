package main

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
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
// and requests per call of the Pipeline's defaults row, over 20 seeds,
// are within seedSpread of each other. The moment its breaker closes, on
// a probe served while the capacity comes back, decides the load of the
// ramp; when the probe went at the speed of the moment it started, it
// spread that load 16.6%, the calls sent in the ramp 1.5 to 2.5 requests
// each. With -v, it logs the smallest, median and largest figures, of
// grpc-go's row too, for reference.
func TestSlowRecoveryAgreesAcrossSeeds(t *testing.T) {
	if raceEnabled {
		t.Skip("20 runs take minutes under the race detector")
	}
	sc := scenarioByKey("slowrecovery")
	var run []strategy
	for _, name := range []string{grpcName, defaultsName} {
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
