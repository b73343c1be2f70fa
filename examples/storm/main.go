// Command storm shows what retry strategies do to a dependency that goes
// down and comes back. It has two parts.
//
// The outage: N clients (1000 by default), each making one call a second,
// call a fake backend that is down for two seconds and then recovers with a
// capacity ramping from a tenth to 1.5 times the offered load, as a real
// service restarting does. Each strategy (immediate retry, exponential
// backoff without jitter, full, equal and decorrelated jitter, and the full
// Pipeline: breaker, full jitter and a retry quota) runs against its own
// backend, all at once, in real time: about seven seconds. It prints a
// table per strategy and writes an SVG chart of the load each backend saw.
//
// The contention: Marc Brooker's simulation of clients contending for one
// resource (base 5 ms, cap 2 s): every client tries at once, one attempt
// can hold the resource at a time, and the losers back off. It runs in
// simulated time, so at once.
//
// Usage:
//
//	go run ./examples/storm [-clients 1000] [-contenders 100] [-svg path]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	clients := flag.Int("clients", 1000, "clients in the outage run, each making one call a second")
	contenders := flag.Int("contenders", 100, "clients in the contention simulation")
	svg := flag.String("svg", filepath.Join(os.TempDir(), "storm.svg"), "where to write the chart (docs/storm.svg to update the docs)")
	flag.Parse()

	fmt.Printf("Outage: %d clients, one call a second each; the backend is down from %v to %v,\n", *clients, outageStart, outageEnd)
	fmt.Printf("then recovers with a capacity ramping from 10%% to 150%% of the offered load over %v.\n\n", rampLength)
	results := runOutage(*clients)
	printOutage(os.Stdout, results, *clients)
	if err := writeSVG(*svg, results, *clients); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	fmt.Printf("\nChart of the load per strategy: %s\n\n", *svg)

	fmt.Printf("Contention (Brooker's simulation): %d clients, base 5 ms, cap 2 s, mean of %d runs.\n\n", *contenders, contentionRuns)
	printContention(os.Stdout, runContention(*contenders, contentionRuns))
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}
