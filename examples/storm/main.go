// Command storm shows what retry strategies do to a dependency that goes
// down and comes back. It has two parts.
//
// The outage: N clients (1000 by default), each making one call a second,
// call a fake backend that is down for two seconds and then recovers with a
// capacity ramping from a tenth to 1.5 times the offered load, as a real
// service restarting does. Each strategy (immediate retry, exponential
// backoff without and with full jitter, the Pipeline: breaker, full jitter
// and a retry quota, and the Pipeline waiting when the breaker is open
// behind an adaptive concurrency limit) runs against its own backend, all
// at once, in real time: about eight seconds. It prints a row per strategy
// and writes an SVG chart of the load each backend saw. In real time the
// clients fall behind their schedule on a busy machine, so the table
// divides by the calls they actually started.
//
// The contention: Marc Brooker's simulation of clients updating one row
// under optimistic concurrency, over a network of 10 +- 2 ms: read the
// version, write it back, back off and start again if the write lost.
// It runs in simulated time, so at once.
//
// The figures of docs/storm.md, and a third scenario, a metastable
// failure, run in the fake time of testing/synctest, where they are
// exact and reproducible:
//
//	go test ./examples/storm -run TestFigures -v
//
// Usage:
//
//	go run ./examples/storm [-clients 1000] [-svg path]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// demoStrategies are the outage strategies the demo runs: all of them at
// once, in real time, would be more than two cores can run on schedule.
var demoStrategies = map[string]bool{
	"immediate retry": true, "exponential, no jitter": true, "full jitter": true,
	pipelineName: true, waitName: true,
}

func main() {
	clients := flag.Int("clients", 1000, "clients in the outage run, each making one call a second")
	svg := flag.String("svg", filepath.Join(os.TempDir(), "storm.svg"), "where to write the chart")
	flag.Parse()

	fmt.Printf("Outage, in real time: %d clients, one call a second each; the backend is down from %v to %v,\n", *clients, outageStart, outageEnd)
	fmt.Printf("then recovers with a capacity ramping from 10%% to 150%% of the offered load over %v.\n\n", rampLength)
	var strategies []strategy
	for _, s := range outageStrategies {
		if demoStrategies[s.name] {
			strategies = append(strategies, s)
		}
	}
	results := runOutage(*clients, strategies)
	printOutage(os.Stdout, results)
	if err := outageChart(results, *clients).write(*svg); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	fmt.Printf("\nChart of the load per strategy: %s\n\n", *svg)

	fmt.Printf("Contention (Brooker's simulation): base 5 ms, cap 2 s, network 10 +- 2 ms, mean of %d runs.\n\n", contentionRuns)
	printContention(os.Stdout, runContention(contentionCounts, contentionRuns), contentionCounts)
	fmt.Println("\nThe figures of docs/storm.md, in fake time, with a metastable failure: go test ./examples/storm -run TestFigures -v")
}
