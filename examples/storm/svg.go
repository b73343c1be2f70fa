package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

var colors = []string{"#d62728", "#ff7f0e", "#2ca02c", "#17becf", "#9467bd", "#1f77b4", "#8c564b", "#e377c2", "#7f7f7f"}

// chart is a line chart of values per bucket over time.
type chart struct {
	title string
	// shade marks a span of time, such as the outage, labelled shadeLabel.
	shadeFrom, shadeTo time.Duration
	shadeLabel         string
	// ref draws a dashed horizontal line labelled refLabel, when refLabel is set.
	ref      float64
	refLabel string
	lines    []line
}

// line is one series: a value per bucket.
type line struct {
	name   string
	values []float64
}

// write draws the chart as an SVG file at path.
func (c chart) write(path string) error {
	const w, h, left, right, top, bottom = 900.0, 420.0, 60.0, 330.0, 40.0, 40.0
	n, peak := 0, c.ref
	for _, l := range c.lines {
		n = max(n, len(l.values))
		for _, v := range l.values {
			peak = max(peak, v)
		}
	}
	if n < 2 || peak == 0 {
		return fmt.Errorf("nothing to draw in %q", c.title)
	}
	plotW, plotH := w-left-right, h-top-bottom
	x := func(i int) float64 { return left + plotW*float64(i)/float64(n-1) }
	y := func(v float64) float64 { return top + plotH*(1-v/peak) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15">%s</text>`+"\n", left, c.title)
	sx1, sx2 := x(int(c.shadeFrom/bucket)), x(int(c.shadeTo/bucket))
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#eee"/>`+"\n", sx1, top, sx2-sx1, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#888">%s</text>`+"\n", sx1+4, top+14, c.shadeLabel)
	if c.refLabel != "" {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`+"\n", left, left+plotW, y(c.ref), y(c.ref))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555" text-anchor="end">%s</text>`+"\n", left+plotW, y(c.ref)-4, c.refLabel)
	}
	// Axes and ticks.
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left+plotW, top+plotH, top+plotH)
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left, top, top+plotH)
	for s := 0; time.Duration(s)*time.Second <= time.Duration(n-1)*bucket; s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%ds</text>`+"\n", x(s*int(time.Second/bucket)), top+plotH+16, s)
	}
	for _, v := range []float64{0, peak / 2, peak} {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	for i, l := range c.lines {
		pts := make([]string, n)
		for j := range n {
			v := 0.0
			if j < len(l.values) {
				v = l.values[j]
			}
			pts[j] = fmt.Sprintf("%.1f,%.1f", x(j), y(v))
		}
		color := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		ly := top + 20 + float64(i)*22
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", w-right+20, w-right+44, ly, ly, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", w-right+50, ly+4, l.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// goodputChart is the chart of the goodput per bucket of each strategy
// in one scenario, in percent, with its fault shaded.
func goodputChart(sc *scenario, results []result) chart {
	c := chart{title: fmt.Sprintf("%s: calls that succeeded per 100 ms (%% of those started)", sc.name), ref: 100, refLabel: "all calls"}
	if sc.recovered > 0 {
		c.shadeFrom, c.shadeTo, c.shadeLabel = sc.healthy[0].to, sc.recovered, "fault"
	}
	for _, r := range results {
		g := r.goodput()
		for i := range g {
			g[i] *= 100
		}
		c.lines = append(c.lines, line{r.strategy, g})
	}
	return c
}
