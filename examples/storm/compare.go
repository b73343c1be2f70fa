package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Issue #24 asks of the real-time runs (-realtime -runs 3) that they agree
// within runsSpread of each other and within virtualSpread of virtual
// time, in calls ok and in backend requests per call.
const (
	runsSpread    = 0.10
	virtualSpread = 0.15
)

// comparison is one strategy's figures in the real-time runs of a
// scenario that were reported, and in virtual time.
type comparison struct {
	strategy         string
	ok               []int
	perCall          []float64
	virtualOK        int
	virtualPerCall   float64
	reported, behind int // runs
}

// compare gathers, per strategy of virtual, its figures in runs (nil: a
// run that fell behind, not reported).
func compare(runs [][]result, virtual []result) []comparison {
	out := make([]comparison, len(virtual))
	for i, v := range virtual {
		c := comparison{strategy: v.strategy, virtualOK: v.ok(), virtualPerCall: v.perCall()}
		for _, run := range runs {
			j := slices.IndexFunc(run, func(r result) bool { return r.strategy == v.strategy })
			if j < 0 {
				c.behind++
				continue
			}
			c.reported++
			c.ok = append(c.ok, run[j].ok())
			c.perCall = append(c.perCall, run[j].perCall())
		}
		out[i] = c
	}
	return out
}

// spread is max/min - 1 of xs: 0 for one figure or none, +Inf when the
// least is 0 and the most is not.
func spread(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	switch {
	case hi == lo:
		return 0
	case lo <= 0:
		return math.Inf(1)
	}
	return hi/lo - 1
}

// ratios returns the least and the most of xs / v (1 for 0 / 0).
func ratios(xs []float64, v float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		r := 1.0
		switch {
		case v != 0:
			r = x / v
		case x != 0:
			r = math.Inf(1)
		}
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo, hi
}

func ints(xs []int) []float64 {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return f
}

// agree says whether the runs of c agree with each other within runsSpread
// and with virtual time within virtualSpread, in calls ok and requests per
// call; with no run reported, neither, and with one, not with each other.
func (c comparison) agree() (runs, virtual bool) {
	if c.reported == 0 {
		return false, false
	}
	runs = c.reported > 1 && spread(ints(c.ok)) <= runsSpread+1e-9 && spread(c.perCall) <= runsSpread+1e-9
	okLo, okHi := ratios(ints(c.ok), float64(c.virtualOK))
	pcLo, pcHi := ratios(c.perCall, c.virtualPerCall)
	within := func(lo, hi float64) bool { return lo >= 1-virtualSpread-1e-9 && hi <= 1+virtualSpread+1e-9 }
	return runs, within(okLo, okHi) && within(pcLo, pcHi)
}

func pct(f float64) string {
	if math.IsInf(f, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func ratioRange(lo, hi float64) string {
	if math.IsInf(lo, 1) {
		return "-"
	}
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f-%.2f", lo, hi)
}

func yesNo(b bool) string {
	if b {
		return "met"
	}
	return "no"
}

// printComparison writes, per strategy, its calls ok and requests per
// call in each real-time run reported, their spread (max/min - 1), the
// virtual time's figure, the ratio of the runs to it, and whether the
// runs meet the bounds of issue #24.
func printComparison(w io.Writer, sc *scenario, n int, cs []comparison) {
	runs := "runs"
	if n == 1 {
		runs = "run"
	}
	fmt.Fprintf(w, "%s: %d %s in real time against virtual time (spread: max/min - 1 over the runs reported;\n", sc.name, n, runs)
	fmt.Fprintf(w, "/ virtual: each run over virtual time; goals: spread <= %.0f%%, within +-%.0f%% of virtual time).\n\n", 100*runsSpread, 100*virtualSpread)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tcalls ok\tspread\tvirtual\t/ virtual\trequests/call\tspread\tvirtual\t/ virtual\truns agree\tas virtual\t")
	for _, c := range cs {
		okText := make([]string, len(c.ok))
		for i, v := range c.ok {
			okText[i] = fmt.Sprint(v)
		}
		pcText := make([]string, len(c.perCall))
		for i, v := range c.perCall {
			pcText[i] = fmt.Sprintf("%.2f", v)
		}
		for range c.behind {
			okText, pcText = append(okText, "behind"), append(pcText, "behind")
		}
		okLo, okHi := ratios(ints(c.ok), float64(c.virtualOK))
		pcLo, pcHi := ratios(c.perCall, c.virtualPerCall)
		runs, virtual := c.agree()
		okSpread, pcSpread := pct(spread(ints(c.ok))), pct(spread(c.perCall))
		if c.reported < 2 {
			okSpread, pcSpread = "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n", c.strategy,
			strings.Join(okText, " "), okSpread, c.virtualOK, ratioRange(okLo, okHi),
			strings.Join(pcText, " "), pcSpread, c.virtualPerCall, ratioRange(pcLo, pcHi),
			yesNo(runs), yesNo(virtual))
	}
	tw.Flush()
}
