package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "TestDocsQuoteTheDemo rewrites the outputs docs/storm.md quotes")

func TestMain(m *testing.M) {
	if os.Getenv(envServe) != "" { // started by startBackendProcess, in TestRemoteBackend and TestRemoteGRPC
		scenarios = remoteScenarios()
		if err := serveBackends(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	goleak.VerifyTestMain(m)
}

const stormDoc = "../../docs/storm.md"

// quote is a block of docs/storm.md that quotes the output of a command:
//
//	<!-- output of: go run ./examples/storm -all -->
//	```
//	...
//	```
type quote struct {
	args       []string
	start, end int // the block's text, between its fences, in the page
}

var quoteMarker = regexp.MustCompile("<!-- output of: go run ./examples/storm(.*?) -->\n```\n")

func quotes(t *testing.T, page string) []quote {
	t.Helper()
	var q []quote
	for _, m := range quoteMarker.FindAllStringSubmatchIndex(page, -1) {
		end := strings.Index(page[m[1]:], "```\n")
		require.GreaterOrEqual(t, end, 0, "the block at byte %d of docs/storm.md has no closing fence", m[1])
		q = append(q, quote{args: strings.Fields(page[m[2]:m[3]]), start: m[1], end: m[1] + end})
	}
	return q
}

// demoOutput returns what go run ./examples/storm args prints.
func demoOutput(t *testing.T, args []string) string {
	t.Helper()
	o, err := parseArgs(args)
	require.NoError(t, err)
	out, _ := render(t, o)
	return out
}

// TestDocsQuoteTheDemo fails when docs/storm.md or docs/retries.md no
// longer quotes exactly what the demo prints, in any of their blocks
// (with -update, it rewrites them), and when a figure in the text of
// docs/storm.md (a count, a share, a ratio) is in no output: a figure of
// the text gone stale. Under the race detector it is skipped: its runs take minutes
// there; TestRunsAreReproducible covers the harness.
func TestDocsQuoteTheDemo(t *testing.T) {
	if raceEnabled {
		t.Skip("the demo's runs take minutes under the race detector: run go test ./examples/storm without -race")
	}
	page, outputs := checkQuotes(t, stormDoc)
	require.Empty(t, quotes(t, page)[0].args, "the first block of docs/storm.md is what go run ./examples/storm prints")
	checkQuotes(t, retriesDoc)
	if *update {
		return
	}
	all := strings.Join(outputs, "\n")
	for _, fig := range proseFigures(page) {
		assert.True(t, strings.Contains(all, fig), "docs/storm.md says %s, which no output of the demo does", fig)
	}
}

const retriesDoc = "../../docs/retries.md"

// checkQuotes compares each block of the page at path that quotes the demo
// with what the demo prints (or, with -update, rewrites it), and returns
// the page and the outputs.
func checkQuotes(t *testing.T, path string) (string, []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(raw)
	qs := quotes(t, page)
	require.NotEmpty(t, qs, "%s quotes no output of the demo", path)
	var outputs []string
	updated := page
	for i := len(qs) - 1; i >= 0; i-- { // from the end, so that the offsets of the others hold
		q := qs[i]
		got := demoOutput(t, q.args)
		require.NotEmpty(t, got)
		outputs = append(outputs, got)
		if *update {
			updated = updated[:q.start] + got + updated[q.end:]
			continue
		}
		assert.Equal(t, got, page[q.start:q.end], "%s quotes something else than go run ./examples/storm %s prints (go test ./examples/storm -run TestDocsQuoteTheDemo -update rewrites it)",
			filepath.Base(path), strings.Join(q.args, " "))
	}
	if *update && updated != page {
		require.NoError(t, os.WriteFile(path, []byte(updated), 0o644))
	}
	return page, outputs
}

var figure = regexp.MustCompile(`\d[\d,]*(\.\d+)?(%|x\b)?`)

// notPrinted are the figures of docs/storm.md's text that come from
// elsewhere than the demo's output, and where.
var notPrinted = map[string]string{
	"1,843": "grpc-go itself in the outage: TestGRPCModelMatchesGRPCGo -v, over three runs",
	"1,853": "grpc-go itself in the outage: TestGRPCModelMatchesGRPCGo -v, over three runs",
	"0.8":   "grpc-go's jitter factor, from its code",
	"10.5":  "how long go run ./examples/storm took",
	"7.8":   "how long go run ./examples/storm -all took",
}

// endOfScenarios marks the end of what the scenarios print: the figures
// of the text below it come from elsewhere.
const endOfScenarios = "<!-- not from the scenarios"

// proseFigures returns the figures (of more than one digit, without
// their thousands separators) of page outside its code blocks, up to
// endOfScenarios, and those of notPrinted; not the digits of a name
// (v1.85.0, #24).
func proseFigures(page string) []string {
	var out []string
	fenced := false
	page, _, _ = strings.Cut(page, endOfScenarios)
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range figure.FindAllStringIndex(l, -1) {
			f := strings.TrimRight(l[m[0]:m[1]], ",")
			if m[0] > 0 && strings.ContainsAny(l[m[0]-1:m[0]], ".#v-_/abcdefghijklmnopqrstuvwyzABCDEFGHIJKLMNOPQRSTUVWXYZ") ||
				m[1] < len(l) && l[m[1]] == '.' && m[1]+1 < len(l) && l[m[1]+1] >= '0' && l[m[1]+1] <= '9' || // 127.0.0.1
				len(strings.TrimRight(f, "%x")) < 2 || notPrinted[f] != "" {
				continue
			}
			out = append(out, strings.ReplaceAll(f, ",", ""))
		}
	}
	return out
}

func TestProseFigures(t *testing.T) {
	assert.Equal(t, []string{"84.8%", "0.19x", "1566", "98%", "100"},
		proseFigures("calls ok 84.8% at 0.19x, 1,566 calls, 7 of v1.85.0\n```\n12.5% 1.5x\n```\nthe goal, 98% of #24 in 100ms, 10.5 s on 127.0.0.1\n"+endOfScenarios+" -->\n9% fewer\n"))
}

// short is a scenario small enough for the race detector: flapping for
// 1.5 s, then healthy.
func short() *scenario {
	sc := *scenarioByKey("flapping")
	sc.until = 2 * time.Second
	sc.rate = 200
	sc.down = func(t time.Duration) bool {
		return t >= 300*time.Millisecond && t < 1800*time.Millisecond && t%flapPeriod < flapDown
	}
	return &sc
}

// TestRunsAreReproducible: two runs with a seed give the same figures, of
// every strategy; another seed, others.
func TestRunsAreReproducible(t *testing.T) {
	sc := short()
	var a, b, c []result
	synctest.Test(t, func(t *testing.T) { a = runScenario(sc, strategies, 1) })
	synctest.Test(t, func(t *testing.T) { b = runScenario(sc, strategies, 1) })
	synctest.Test(t, func(t *testing.T) { c = runScenario(sc, strategies, 2) })
	var ta, tb, tc bytes.Buffer
	printScenario(&ta, sc, a)
	printScenario(&tb, sc, b)
	printScenario(&tc, sc, c)
	assert.Equal(t, ta.String(), tb.String())
	assert.NotEqual(t, ta.String(), tc.String())
	for i := range a {
		assert.Equal(t, a[i].calls, b[i].calls, a[i].strategy)
		assert.Equal(t, a[i].load, b[i].load, a[i].strategy)
	}
}

// TestBackendFaults: the backend answers as the scenario says, and counts
// each request.
func TestBackendFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		down := &scenario{hosts: 1, workers: 1, queue: 1, service: uniformService, down: between(0, time.Second)}
		b := newBackend(down, start)
		defer b.close()
		c := &call{b: b}
		_, err := c.attempt(context.Background())
		assert.ErrorIs(t, err, errUnavailable)
		assert.Equal(t, netDelay, time.Since(start), "a 503 comes after the network's delay")
		time.Sleep(time.Second)
		t0 := time.Now()
		_, err = c.attempt(context.Background())
		require.NoError(t, err)
		assert.InDelta(t, float64(netDelay+10*time.Millisecond), float64(time.Since(t0)), float64(5*time.Millisecond))
		assert.Equal(t, 2, sum(b.requests.counts(), 0, 2*time.Second))
	})
	synctest.Test(t, func(t *testing.T) {
		dead := &scenario{hosts: 3, workers: 1, queue: 10, service: uniformService, deadHost: true}
		b := newBackend(dead, time.Now())
		defer b.close()
		refused := 0
		for i := range 300 {
			_, err := (&call{id: uint64(i), b: b}).attempt(context.Background())
			if errors.Is(err, errRefused) {
				refused++
			}
		}
		assert.InDelta(t, 100, refused, 30, "a third of the requests go to the dead host")
	})
}

// TestSlowServerWastesWork: a request whose caller gave up still takes a
// worker, as the metastable scenario needs.
func TestSlowServerWastesWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &scenario{hosts: 1, workers: 1, queue: 10, service: func(*rand.Rand) time.Duration { return 100 * time.Millisecond }}
		b := newBackend(sc, time.Now())
		defer b.close()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		for i := range 2 {
			go func() { _, _ = (&call{id: uint64(i), b: b}).attempt(ctx) }()
		}
		time.Sleep(time.Second)
		assert.Equal(t, int64(2), b.served.Load())
		assert.Equal(t, int64(2), b.wasted.Load())
	})
}

// TestGRPCThrottler follows grpc-go's retryThrottler: retries stop once
// failures have taken the tokens to half, and successes give back a tenth
// each.
func TestGRPCThrottler(t *testing.T) {
	th := &grpcThrottler{max: 10, thresh: 5, ratio: 0.1, tokens: 10}
	for i := range 4 {
		assert.False(t, th.throttle(), "failure %d", i+1)
	}
	assert.True(t, th.throttle(), "the fifth failure leaves 5 tokens: throttled")
	for range 10 {
		th.successfulRPC()
	}
	assert.InDelta(t, 6, th.tokens, 1e-9)
	assert.True(t, th.throttle(), "a failure takes them back to 5: still throttled")
	for range 11 {
		th.successfulRPC()
	}
	assert.False(t, th.throttle(), "6.1 - 1 = 5.1 tokens: above half, a retry is allowed")
}

// TestGRPCRetryBacksOff: grpc-go's policy makes 5 attempts at
// 100 ms * 2^n +- 20% apart, within the deadline.
func TestGRPCRetryBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &scenario{hosts: 1, workers: 1, queue: 1, service: uniformService, down: between(0, time.Hour)}
		b := newBackend(sc, time.Now())
		defer b.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		c := &call{b: b}
		require.ErrorIs(t, grpcRetry(nil)(ctx, c), errUnavailable)
		assert.Equal(t, uint64(5), c.n.Load())
		took := time.Since(start) - 5*netDelay
		assert.GreaterOrEqual(t, took, time.Duration(0.8*float64(1500*time.Millisecond)))
		assert.LessOrEqual(t, took, time.Duration(1.2*float64(1500*time.Millisecond)))
	})
}

// TestPipelineJitterIsFullJitter: the pipeline's retries wait the full
// jitter delays drawn from the call's own source, and give up when the
// next would end past the deadline.
func TestPipelineJitterIsFullJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &scenario{hosts: 1, workers: 1, queue: 1, service: uniformService, down: between(0, time.Hour)}
		b := newBackend(sc, time.Now())
		defer b.close()
		s, _ := strategyByName(plainName)
		do := s.build(sc)
		for id := range uint64(50) {
			c := &call{id: id, seed: 7, b: b}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			start := time.Now()
			require.Error(t, do(ctx, c))
			cancel()
			want := 4 * netDelay
			for n := range uint64(3) {
				want += fullJitter(c.rand(streamJitter, n+1), n)
			}
			assert.Equal(t, uint64(4), c.n.Load())
			assert.Equal(t, want, time.Since(start), "call %d", id)
		}
	})
}

func TestFullJitterStaysBelowItsCap(t *testing.T) {
	c := &call{seed: 1}
	for n := range uint64(40) {
		d := fullJitter(c.rand(streamJitter, n), n)
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, min(defaultBase<<min(n, 20), defaultCap))
	}
}

// TestGoals: the goals compare with the best other strategy and the best
// plain retry, by calls ok.
func TestGoals(t *testing.T) {
	sc := &scenario{until: time.Second, recovered: 500 * time.Millisecond, heavy: true,
		healthy: []span{{0, 200 * time.Millisecond}, {500 * time.Millisecond, forever}}}
	mk := func(name string, ok, requests int) result {
		r := result{strategy: name, sc: sc, requests: requests}
		for i := range 100 {
			start := time.Duration(i) * 10 * time.Millisecond
			r.calls = append(r.calls, outcome{start: start, end: start + time.Millisecond, ok: i < ok})
		}
		return r
	}
	results := []result{
		mk(noRetryName, 50, 100),
		mk(plainName, 90, 300),
		mk(grpcName, 95, 400),
		mk(defaultsName, 94, 150),
	}
	g := goals(results, defaultsName)
	require.Len(t, g, 4)
	assert.Contains(t, g[0].what, grpcName)
	assert.True(t, g[0].met, "94 of 95 is over 98%%")
	assert.Contains(t, g[1].what, grpcName, "the best plain retry by calls ok")
	assert.True(t, g[1].met, "150 <= 0.5 x 400")
	assert.False(t, g[2].met, "calls failed while healthy")
	assert.Equal(t, "6", g[2].value)
	assert.False(t, g[3].met, "goodput is not back at 95%% after 500 ms")
}

func TestHealthySpansOfFlapping(t *testing.T) {
	sc := scenarioByKey("flapping")
	assert.True(t, sc.healthyThrough(500*time.Millisecond, 900*time.Millisecond))
	assert.False(t, sc.healthyThrough(900*time.Millisecond, 1100*time.Millisecond), "down from 1 s")
	assert.True(t, sc.healthyThrough(1070*time.Millisecond, 1290*time.Millisecond))
	assert.False(t, sc.healthyThrough(1070*time.Millisecond, 1310*time.Millisecond), "down again at 1.3 s")
	assert.True(t, sc.healthyThrough(7*time.Second, 8*time.Second))
}

// TestHeavyTail: the heavy tail's p99 is 10 times its median.
func TestHeavyTail(t *testing.T) {
	c := &call{seed: 3}
	var d []time.Duration
	for i := range uint64(20000) {
		d = append(d, heavyTailService(c.rand(streamBackend, i)))
	}
	sorted := append([]time.Duration(nil), d...)
	slices.Sort(sorted)
	p50, p99 := percentile(sorted, 0.5), percentile(sorted, 0.99)
	assert.InDelta(t, 10, float64(p99)/float64(p50), 1)
	assert.InDelta(t, float64(10*time.Millisecond), float64(p50), float64(time.Millisecond))
}

func TestParseArgs(t *testing.T) {
	o, err := parseArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, headline, o.keys)
	assert.Len(t, o.strategies, len(strategies))
	o, err = parseArgs([]string{"-all", "-extra"})
	require.NoError(t, err)
	assert.Len(t, o.keys, 7)
	assert.Len(t, o.strategies, len(strategies)+len(extraStrategies))
	_, err = parseArgs([]string{"-scenarios", "outage,nope"})
	assert.ErrorContains(t, err, `no scenario "nope"`)
	o, err = parseArgs([]string{"-strategies", "grpc,wait"})
	require.NoError(t, err)
	require.Len(t, o.strategies, 2)
	assert.Equal(t, grpcName, o.strategies[0].name)
	assert.Equal(t, waitName, o.strategies[1].name)
	assert.True(t, o.extra, "the legend of the extra strategies is printed")
	_, err = parseArgs([]string{"-strategies", "grpc,nope"})
	assert.ErrorContains(t, err, `no strategy "nope"`)
	o, err = parseArgs([]string{"-http", "-runs", "3"})
	require.NoError(t, err)
	assert.True(t, o.realtime, "-http is in real time")
	assert.Equal(t, 3, o.runs)
	_, err = parseArgs([]string{"-realtime", "-runs", "0"})
	assert.ErrorContains(t, err, "-runs 0")
	o, err = parseArgs([]string{"-grpc"})
	require.NoError(t, err)
	assert.True(t, o.realtime && o.grpc && !o.http, "-grpc is in real time, not over HTTP")
	_, err = parseArgs([]string{"-grpc", "-http"})
	assert.ErrorContains(t, err, "one or the other")
	o, err = parseArgs([]string{"-http", "-maxshort", "0.05"})
	require.NoError(t, err)
	assert.InDelta(t, 0.05, o.maxShort, 1e-12)
	_, err = parseArgs([]string{"-http", "-maxshort", "1"})
	assert.ErrorContains(t, err, "-maxshort 1")
}

// TestChart writes a chart of a short run.
func TestChart(t *testing.T) {
	sc := short()
	var r []result
	synctest.Test(t, func(t *testing.T) { r = runScenario(sc, strategies[:2], 1) })
	path := filepath.Join(t.TempDir(), "c.svg")
	require.NoError(t, goodputChart(sc, r).write(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), noRetryName)
}

// TestContentionMatchesBrookersShape checks the contention's shape on
// fewer runs than the figures: exponential backoff without jitter makes
// about twice the calls of full jitter (not the N(N+1)/2 of exact
// lockstep), no backoff far more, and full jitter finishes first.
func TestContentionMatchesBrookersShape(t *testing.T) {
	results := runContention([]int{100}, 10)
	none := find(results, "exponential, no jitter", 100)
	full := find(results, "full jitter", 100)
	immediate := find(results, "no backoff", 100)
	assert.InDelta(t, 2, none.calls/full.calls, 0.6, "no jitter makes about twice the calls of full jitter")
	assert.Greater(t, immediate.calls, none.calls, "and no backoff more still")
	assert.Less(t, full.time, none.time, "full jitter finishes sooner than no jitter")
}

// TestHTTPTransportKeepsTheDraws: over HTTP, a request meets the fate it
// meets in process (its host, and so whether it is refused), and the
// backend counts it.
func TestHTTPTransportKeepsTheDraws(t *testing.T) {
	sc := &scenario{hosts: 3, workers: 2, queue: 10, service: func(*rand.Rand) time.Duration { return time.Millisecond }, deadHost: true}
	local := newBackend(sc, time.Now())
	defer local.close()
	remote := newBackend(sc, time.Now())
	defer remote.close()
	send, stop := serveHTTP(remote)
	defer stop()
	for id := range uint64(30) {
		c := &call{id: id, seed: 5, b: local}
		_, want := c.attempt(context.Background())
		got := send(context.Background(), &call{id: id, seed: 5}, 1)
		assert.Equal(t, errors.Is(want, errRefused), errors.Is(got, errRefused), "call %d", id)
		assert.Equal(t, want == nil, got == nil, "call %d: %v, %v", id, want, got)
	}
	assert.Equal(t, int64(30), int64(sum(remote.requests.counts(), 0, time.Minute)))
}

// TestBehind: a run is reported only if its calls started on time.
func TestBehind(t *testing.T) {
	onTime := result{late: []time.Duration{0, time.Millisecond, 500 * time.Microsecond}}
	late, _ := behind([]result{onTime}, 0)
	assert.False(t, late)
	slow := result{late: make([]time.Duration, 100)}
	slow.late[99] = 30 * time.Millisecond
	late, why := behind([]result{onTime, slow}, 0)
	assert.True(t, late, "one call 30 ms late is too late")
	assert.Contains(t, why, "30ms at worst")
	lagging := result{late: slices.Repeat([]time.Duration{3 * time.Millisecond}, 100)}
	late, _ = behind([]result{lagging}, 0)
	assert.True(t, late, "a p99 of 3 ms is too late")
	sc := scenarioByKey("outage")
	assert.Contains(t, fellBehind(sc, why), "Fewer strategies at once (-strategies)")

	// With -maxshort, lag alone refuses no run: its offered load does.
	lagging.sc, lagging.calls = &scenario{rate: 100, until: time.Second}, make([]outcome, 100)
	late, why = behind([]result{lagging}, 0.05)
	assert.False(t, late, "3 ms late, on schedule to the second: %s", why)
	assert.Contains(t, why, "offered load 0.0% short of schedule in its worst second (limit 5.0%)")
	for i := range 6 {
		lagging.calls[i].start = time.Second // 6 of the second's 100 calls started in the next
	}
	late, _ = behind([]result{lagging}, 0.05)
	assert.True(t, late, "6% short")
}

// TestLateCallsCountInTheLastBucket: in real time, the last calls may
// start after the run's end, late; their goodput counts in the last
// bucket, where they were due.
func TestLateCallsCountInTheLastBucket(t *testing.T) {
	sc := &scenario{rate: 20, until: time.Second, recovered: 500 * time.Millisecond}
	r := result{sc: sc}
	for i := range 20 {
		r.calls = append(r.calls, outcome{start: time.Duration(i) * time.Second / 20, ok: true})
	}
	r.calls[19] = outcome{start: time.Second + 3*time.Millisecond} // due at 950 ms, failed
	g := r.goodput()
	require.Len(t, g, 10)
	assert.InDelta(t, 0.5, g[9], 1e-9, "the late call counts where it was due")
	assert.Equal(t, "never", r.backString())
}

// TestOfferedShort: the offered load of a run is measured per second
// against its schedule; a second that started 380 of its 400 calls is 5%
// short.
func TestOfferedShort(t *testing.T) {
	sc := &scenario{rate: 400, until: 2 * time.Second}
	r := result{sc: sc}
	for i := range 800 {
		start := time.Duration(i) * time.Second / 400
		if i >= 380 && i < 400 {
			start = time.Second + time.Millisecond // 20 calls of the first second late into the second
		}
		r.calls = append(r.calls, outcome{start: start})
	}
	assert.InDelta(t, 0.05, r.offeredShort(), 1e-9)
	_, why := behind([]result{r}, 0)
	assert.Contains(t, why, "offered load 5.0% short of schedule in its worst second")
	r.calls = r.calls[:0]
	for i := range 800 {
		r.calls = append(r.calls, outcome{start: time.Duration(i) * time.Second / 400})
	}
	assert.Zero(t, r.offeredShort(), "on schedule")
}

// TestRealTimeRuns runs a short healthy scenario on the machine's clock,
// in process and over HTTP: every call succeeds, with one request each,
// whether or not the run fell behind.
func TestRealTimeRuns(t *testing.T) {
	sc := &scenario{key: "healthy", name: "Healthy", rate: 100, until: 300 * time.Millisecond, hosts: 1, workers: 4,
		queue: 50, service: uniformService, healthy: []span{{0, forever}}, deadline: time.Second}
	s, _ := strategyByName(defaultsName)
	for _, overHTTP := range []bool{false, true} {
		results := runScenarioOver(sc, []strategy{s}, 1, overHTTP)
		require.Len(t, results, 1)
		late, why := behind(results, 0)
		t.Logf("over HTTP %v: fell behind %v (%s)", overHTTP, late, why)
		// A busy machine makes calls late, not failed: each has 1 s.
		assert.Equal(t, 30, results[0].ok(), "over HTTP %v", overHTTP)
		assert.Equal(t, 30, results[0].requests, "over HTTP %v", overHTTP)
	}
}

// TestRemoteBackend: the backends in a process of their own (-remote) give
// a request the fate it meets in process, and send back their counts: a
// healthy run has every call ok with one request each, and with a dead
// host in three, the refusals are those of the draws.
func TestRemoteBackend(t *testing.T) {
	saved := scenarios
	t.Cleanup(func() { scenarios = saved })
	scenarios = remoteScenarios()
	healthy, dead := scenarios[0], scenarios[1]

	addr, stop, err := startBackendProcess() // this test binary, as TestMain serves
	require.NoError(t, err)
	defer stop()
	none, _ := strategyByName(noRetryName)
	r := runScenarioWith(healthy, []strategy{none}, 1, remoteHTTP(addr.http))
	require.Len(t, r, 1)
	assert.Equal(t, 30, r[0].ok())
	assert.Equal(t, 30, r[0].requests, "the backend's own count, sent back")

	inProcess := runScenario(dead, []strategy{none}, 5)
	remote := runScenarioWith(dead, []strategy{none}, 5, remoteHTTP(addr.http))
	assert.Equal(t, inProcess[0].ok(), remote[0].ok(), "the same calls refused")
	assert.Less(t, remote[0].ok(), 30, "a third of the calls go to the dead host")
	assert.Equal(t, 30, remote[0].requests)
}

// remoteScenarios are TestRemoteBackend's, short, which the backends'
// process of the test knows too.
func remoteScenarios() []*scenario {
	return []*scenario{
		{key: "remote-healthy", name: "Healthy", rate: 100, until: 300 * time.Millisecond, hosts: 1, workers: 4,
			queue: 50, service: uniformService, healthy: []span{{0, forever}}, deadline: time.Second},
		{key: "remote-dead", name: "Dead host", rate: 100, until: 300 * time.Millisecond, hosts: 3, workers: 4,
			queue: 50, service: uniformService, deadHost: true, healthy: []span{{0, forever}}, deadline: time.Second},
	}
}
