// Command storm runs retry strategies through the faults a dependency
// has, and prints, for each scenario, what each strategy got its callers
// (calls ok, latency) and what it cost the dependency (requests per call).
//
// Every strategy calls a backend of its own with the same calls, the same
// faults and the same random draws: no retry; retries with full jitter;
// grpc-go's retry policy, with and without its retry throttling;
// failsafe-go's retry and circuit breaker with their defaults; the
// Pipeline with its defaults; and the Pipeline with the options
// docs/retries.md recommends. The scenarios: a full outage of 5 s, a
// brownout, a metastable failure, a heavy tail, one host of three dead,
// a flapping backend and a slow recovery.
//
// It runs in virtual time (testing/synctest), so the figures do not
// depend on the machine: the same every run, and those of docs/storm.md.
//
// Usage:
//
//	go run ./examples/storm                  # the outage, metastable failure and slow recovery
//	go run ./examples/storm -all             # all seven
//	go run ./examples/storm -scenarios outage,flapping
//	go run ./examples/storm -extra           # three more pipelines (-wait: and WaitWhenOpen)
//	go run ./examples/storm -chain           # the "don't retry" signal through a flapping chain
//	go run ./examples/storm -contention      # Brooker's contention model
//	go run ./examples/storm -realtime [-http | -grpc] [-remote] [-runs 3] [-maxshort 0.05] -scenarios outage
//
// In real time, on the machine's clock, a run measures its own lag (how
// late its calls started) and is not reported if it fell behind (with
// -maxshort, only if its offered load fell that far short of schedule);
// after the runs of a scenario, a table compares them with each other and
// with the same scenario in virtual time.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
)

// headline are the scenarios the demo runs by default.
var headline = []string{"outage", "metastable", "slowrecovery"}

// options are what the command line asks for.
type options struct {
	keys       []string   // the scenarios
	strategies []strategy // the strategies
	extra      bool       // the extra strategies are among them
	seed       uint64
	svgDir     string
	contention bool
	chain      bool    // the flapping chain, instead of the scenarios
	realtime   bool    // on the machine's clock
	http       bool    // in real time, over HTTP
	runs       int     // in real time, how many runs of each scenario
	maxShort   float64 // in real time, if above 0: report a run unless its offered load fell more than this short
	grpc       bool    // in real time, over gRPC
	remote     bool    // over HTTP or gRPC, to the backends in a process of their own
	serve      bool    // be that process
}

// parseArgs reads the command line (without the program's name).
func parseArgs(args []string) (options, error) {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	all := fs.Bool("all", false, "run all seven scenarios")
	only := fs.String("scenarios", "", "the scenarios to run, comma-separated: "+strings.Join(scenarioKeys(), ", "))
	seed := fs.Uint64("seed", 1, "the seed of every random draw")
	svgDir := fs.String("svgdir", "", "write a goodput chart per scenario, storm-<scenario>.svg, to this directory")
	extra := fs.Bool("extra", false, "add the default pipeline with the former 30 s open timeout, and with an attempt timeout, and the recommended one with a retry quota")
	wait := fs.Bool("wait", false, "add the recommended pipeline with WaitWhenOpen (its outage row moves by several percent from run to run)")
	contention := fs.Bool("contention", false, "run Brooker's contention model instead")
	chain := fs.Bool("chain", false, "run the flapping chain A -> B -> C -> D, without and with the \"don't retry\" signal, instead")
	only2 := fs.String("strategies", "", "the strategies to run, comma-separated (fewer keep a real-time run on schedule): "+strings.Join(slices.Sorted(maps.Keys(strategyKeys)), ", "))
	realtime := fs.Bool("realtime", false, "run in real time, on the machine's clock, measuring the harness's own lag")
	overHTTP := fs.Bool("http", false, "in real time, call each backend over HTTP on 127.0.0.1")
	overGRPC := fs.Bool("grpc", false, "in real time, call each backend over gRPC on 127.0.0.1: the Pipeline's rows through grpcclient's interceptor, the others one RPC per attempt (grpc-go's own retry: TestRealTimeGRPC)")
	remote := fs.Bool("remote", false, "in real time over HTTP, or over gRPC with -grpc, with the backends in a process of their own (implies -http unless -grpc)")
	serve := fs.Bool("serve", false, "be the backends' process of -remote: listen on 127.0.0.1 for HTTP and for gRPC, and print the two addresses")
	runs := fs.Int("runs", 1, "in real time, run each scenario this many times, and compare the runs with each other and with virtual time")
	maxShort := fs.Float64("maxshort", 0, "in real time, report a run unless its offered load fell more than this share short of schedule in a second (issue #24's bound: 0.05) or a call started 100 ms late or more; 0: refuse a run by its lag")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o := options{keys: headline, strategies: strategies, extra: *extra, seed: *seed, svgDir: *svgDir, contention: *contention, chain: *chain, realtime: *realtime || *overHTTP || *remote || *overGRPC, http: *overHTTP || *remote && !*overGRPC, grpc: *overGRPC, runs: *runs, remote: *remote, serve: *serve}
	if o.grpc && o.http {
		return options{}, fmt.Errorf("-grpc and -http: one or the other")
	}
	if *runs < 1 {
		return options{}, fmt.Errorf("-runs %d: at least 1", *runs)
	}
	if !(*maxShort >= 0 && *maxShort < 1) { // NaN too
		return options{}, fmt.Errorf("-maxshort %v: from 0 to under 1", *maxShort)
	}
	o.maxShort = *maxShort
	switch {
	case *all:
		o.keys = scenarioKeys()
	case *only != "":
		o.keys = strings.Split(*only, ",")
	}
	for _, k := range o.keys {
		if scenarioByKey(k) == nil {
			return options{}, fmt.Errorf("no scenario %q (%s)", k, strings.Join(scenarioKeys(), ", "))
		}
	}
	if o.extra || *only2 != "" {
		o.strategies = append(slices.Clip(o.strategies), extraStrategies...)
	}
	if *wait || *only2 != "" {
		o.strategies = append(slices.Clip(o.strategies), waitStrategy)
		o.extra = o.extra || *wait
	}
	if *only2 != "" {
		var keep []strategy
		for _, k := range strings.Split(*only2, ",") {
			name, ok := strategyKeys[k]
			if !ok {
				return options{}, fmt.Errorf("no strategy %q", k)
			}
			s, _ := strategyByName(name)
			keep = append(keep, s)
		}
		o.strategies, o.extra = keep, slices.ContainsFunc(keep, func(s strategy) bool {
			return s.name == waitName || slices.ContainsFunc(extraStrategies, func(e strategy) bool { return e.name == s.name })
		})
	}
	return o, nil
}

func main() {
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(2)
	}
	if o.serve {
		if err := serveBackends(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "storm:", err)
			os.Exit(1)
		}
		return
	}
	if o.contention {
		fmt.Printf("Contention (Brooker's simulation): base 5 ms, cap 2 s, network 10 +- 2 ms, mean of %d runs.\n\n", contentionRuns)
		printContention(os.Stdout, runContention(contentionCounts, contentionRuns), contentionCounts)
		return
	}

	// Virtual time needs a synctest bubble, which needs a *testing.T:
	// testing.Main runs one, as go test would. It prints PASS or FAIL and
	// exits; the demo's own output goes to the real standard output.
	stdout := os.Stdout
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	os.Stdout = devNull
	os.Args = os.Args[:1] // testing.Main parses the command line as a test's
	testing.Main(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{Name: "storm", F: func(t *testing.T) {
		if o.realtime {
			// Virtual time first, to compare the real-time runs with;
			// the real-time runs outside any bubble.
			if !runRealtime(stdout, o, runVirtual(t, o.keys, o.strategies, o.seed)) {
				t.Fail() // exit status 1
			}
			return
		}
		out, results := render(t, o)
		_, _ = io.WriteString(stdout, out)
		if o.svgDir != "" && !o.chain {
			for i, k := range o.keys {
				if err := goodputChart(scenarioByKey(k), results[i]).write(filepath.Join(o.svgDir, "storm-"+k+".svg")); err != nil {
					fmt.Fprintln(os.Stderr, "storm:", err)
					t.Fail()
				}
			}
		}
	}}}, nil, nil)
}

// trimLines removes the spaces at the end of each line of b, which
// tabwriter leaves after a table's last column.
func trimLines(b []byte) []byte {
	lines := bytes.Split(b, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimRight(l, " ")
	}
	return bytes.Join(lines, []byte("\n"))
}

func scenarioKeys() []string {
	var k []string
	for _, sc := range scenarios {
		k = append(k, sc.key)
	}
	return k
}

// render runs what o asks for in virtual time and returns what the demo
// prints, and the scenarios' results.
func render(t *testing.T, o options) (string, [][]result) {
	var b bytes.Buffer
	if o.chain {
		var r []chainResult
		synctest.Test(t, func(*testing.T) { r = runChains() })
		printChain(&b, r)
		return string(trimLines(b.Bytes())), nil
	}
	results := runVirtual(t, o.keys, o.strategies, o.seed)
	printDemo(&b, o.keys, results, o.extra)
	return b.String(), results
}

// runVirtual runs the scenarios keys, each in a synctest bubble of its
// own, two at a time or as many as there are cores.
func runVirtual(t *testing.T, keys []string, strategies []strategy, seed uint64) [][]result {
	out := make([][]result, len(keys))
	t.Run("scenarios", func(t *testing.T) {
		for i, k := range keys {
			sc := scenarioByKey(k)
			t.Run(k, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(*testing.T) { out[i] = runScenario(sc, strategies, seed) })
			})
		}
	})
	return out
}

// printDemo writes what the demo prints: what it runs, the legend, a table
// per scenario, and how to run the rest.
func printDemo(w io.Writer, keys []string, results [][]result, extra bool) {
	out, b := w, new(bytes.Buffer)
	defer func() { _, _ = out.Write(trimLines(b.Bytes())) }()
	w = b
	fmt.Fprintf(w, "Retry strategies through %d scenarios, in virtual time (testing/synctest): the same calls,\n", len(keys))
	fmt.Fprint(w, "faults and random draws for every strategy, each against a backend of its own.\n\n")
	fmt.Fprint(w, strategyLegend)
	if extra && len(results) > 0 {
		for _, r := range results[0] {
			fmt.Fprint(w, extraLegends[r.strategy])
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, legend)
	for i, k := range keys {
		fmt.Fprintln(w)
		printScenario(w, scenarioByKey(k), results[i])
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, footer)
}

const strategyLegend = `Strategies (each within the caller's deadline of 1 s):
  no retry                     one attempt
  retry, full jitter           retrypolicy.New(): 4 attempts, full jitter below 100 ms doubling to 10 s;
                               attempt timeout 250 ms
  grpc-go retry                grpc-go's retry policy: 5 attempts, 100 ms doubling to 1 s, +-20% jitter,
                               UNAVAILABLE retried; no attempt timeout (grpc-go has none)
  grpc-go retry + throttling   and its retryThrottling: maxTokens 10, tokenRatio 0.1
  failsafe-go retry + breaker  failsafe-go v0.9.8's retry and circuit breaker with their defaults (3 attempts,
                               no delay; opens after 1 failure for 1 minute); attempt timeout 250 ms
  pipeline, defaults           breaker.New() (opens after 5 failures in a row, for 100 ms) and retrypolicy.New()
                               (4 attempts); no attempt timeout (none by default)
  pipeline, recommended        what docs/retries.md recommends: the defaults, and hedging at the p90 for the
                               heavy tail
`

// extraLegends explain the strategies of -extra and -wait.
var extraLegends = map[string]string{
	openName: `  pipeline, defaults + OpenTimeout 30s
                               the default pipeline with the breaker's former default, open for 30 s
`,
	timeoutName: `  pipeline, defaults + attempt timeout
                               the default pipeline with an attempt timeout of 250 ms, as a user may set one
`,
	quotaName: "  ... + quota 10%              the recommended pipeline with a retry quota of 10% of the calls plus 10 a second\n",
	waitName:  "  ... + WaitWhenOpen           the recommended pipeline, calls waiting while the breaker is open\n",
}

const footer = `Goals (issue #24) for the pipeline with its defaults, in every scenario: calls ok >= 98% of the best
other strategy's; backend requests <= 0.5x the best plain retry's (outage, metastable, slow recovery),
<= 1.1x elsewhere; no call failed while the backend was healthy; goodput back above 95% within 200 ms
of the backend being healthy. docs/storm.md says why each is met or not.

All seven scenarios: go run ./examples/storm -all
In real time (a run that falls behind is not reported; fewer strategies keep it on schedule):
go run ./examples/storm -realtime [-http] -runs 3 -scenarios outage -strategies grpc,defaults,recommended
`
