package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeResult is a strategy's result with ok calls of n, and requests.
func fakeResult(sc *scenario, name string, n, ok, requests int) result {
	calls := make([]outcome, n)
	for i := range ok {
		calls[i].ok = true
	}
	return result{strategy: name, sc: sc, calls: calls, requests: requests}
}

// TestCompareRuns: the comparison of real-time runs gives their spread
// and their ratio to virtual time, and says which meet issue #24's
// bounds; a run that fell behind counts in neither.
func TestCompareRuns(t *testing.T) {
	sc := scenarioByKey("outage")
	virtual := []result{fakeResult(sc, grpcName, 1000, 500, 2000), fakeResult(sc, defaultsName, 1000, 400, 500)}
	runs := [][]result{
		{fakeResult(sc, grpcName, 1000, 500, 2000), fakeResult(sc, defaultsName, 1000, 400, 500)},
		nil, // fell behind
		{fakeResult(sc, grpcName, 1000, 540, 2100), fakeResult(sc, defaultsName, 1000, 470, 500)},
	}
	cs := compare(runs, virtual)
	require.Len(t, cs, 2)
	assert.Equal(t, []int{500, 540}, cs[0].ok)
	assert.Equal(t, []float64{2, 2.1}, cs[0].perCall)
	assert.Equal(t, 2, cs[0].reported)
	assert.Equal(t, 1, cs[0].behind)
	assert.InDelta(t, 0.08, spread(ints(cs[0].ok)), 1e-9)
	runsAgree, asVirtual := cs[0].agree()
	assert.True(t, runsAgree, "8% and 5% apart")
	assert.True(t, asVirtual, "at most 8% from virtual time")
	runsAgree, asVirtual = cs[1].agree()
	assert.False(t, runsAgree, "470 is 17.5% more than 400")
	assert.False(t, asVirtual, "470 is 17.5% more than virtual time's 400")

	var b strings.Builder
	printComparison(&b, sc, 3, cs)
	out := b.String()
	assert.Contains(t, out, "3 runs in real time against virtual time")
	assert.Regexp(t, `grpc-go retry +500 540 behind +8\.0% +500 +1\.00-1\.08 +2\.00 2\.10 behind +5\.0% +2\.00 +1\.00-1\.05 +met +met`, out)
	assert.Regexp(t, `pipeline, defaults +400 470 behind +17\.5% +400 +1\.00-1\.18 +0\.50 0\.50 behind +0\.0% +0\.50 +1\.00 +no +no`, out)

	none := compare([][]result{nil}, virtual)
	runsAgree, asVirtual = none[0].agree()
	assert.False(t, runsAgree || asVirtual, "no run reported meets nothing")
	one := compare([][]result{runs[0], nil}, virtual)
	runsAgree, asVirtual = one[0].agree()
	assert.False(t, runsAgree, "one run reported cannot agree with another")
	assert.True(t, asVirtual)
	b.Reset()
	printComparison(&b, sc, 2, one)
	assert.Regexp(t, `grpc-go retry +500 behind +- +500 +1\.00 +2\.00 behind +- +2\.00 +1\.00 +no +met`, b.String())
}

func TestSpreadAndRatios(t *testing.T) {
	assert.Zero(t, spread(nil))
	assert.Zero(t, spread([]float64{3, 3}))
	assert.Equal(t, "inf", pct(spread([]float64{0, 3})))
	lo, hi := ratios([]float64{0, 0}, 0)
	assert.Equal(t, []float64{1, 1}, []float64{lo, hi}, "0 of 0 is as virtual time")
	lo, _ = ratios([]float64{1}, 0)
	assert.Equal(t, "-", ratioRange(lo, lo))
}

// TestRealTimeComparesWithVirtualTime: a real-time run of a short scenario
// prints its table and then the comparison with the virtual run given.
func TestRealTimeComparesWithVirtualTime(t *testing.T) {
	sc := &scenario{key: "outage", name: "Healthy", rate: 100, until: 200 * time.Millisecond, hosts: 1, workers: 4,
		queue: 50, service: uniformService, healthy: []span{{0, forever}}, deadline: time.Second}
	s, _ := strategyByName(noRetryName)
	saved := scenarios
	t.Cleanup(func() { scenarios = saved })
	scenarios = []*scenario{sc}
	var b strings.Builder
	runRealtime(&b, options{keys: []string{"outage"}, strategies: []strategy{s}, seed: 1, runs: 2},
		[][]result{{fakeResult(sc, noRetryName, 20, 20, 20)}})
	out := b.String()
	assert.Equal(t, 2, strings.Count(out, "Run "), "two runs: %s", out)
	assert.Contains(t, out, "Healthy: 2 runs in real time against virtual time")
	// Every call succeeds with one request however late it started; a
	// loaded machine may make a run fall behind, and then it is not counted.
	if !strings.Contains(out, "behind") {
		assert.Regexp(t, `no retry +20 20 +0\.0% +20 +1\.00 +1\.00 1\.00 +0\.0% +1\.00 +1\.00 +met +met`, out)
	}
}
