package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

var colors = []string{"#d62728", "#ff7f0e", "#2ca02c", "#17becf", "#9467bd", "#1f77b4"}

// writeSVG draws the requests each backend received per bucket over time.
func writeSVG(path string, results []outcome, clients int) error {
	const w, h, left, right, top, bottom = 900.0, 420.0, 60.0, 330.0, 40.0, 40.0
	n, peak := 0, 0
	for _, o := range results {
		n = max(n, len(o.load))
		_, p := o.totals()
		peak = max(peak, p)
	}
	if n < 2 || peak == 0 {
		return fmt.Errorf("no load to draw")
	}
	plotW, plotH := w-left-right, h-top-bottom
	x := func(i int) float64 { return left + plotW*float64(i)/float64(n-1) }
	y := func(v float64) float64 { return top + plotH*(1-v/float64(peak)) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15">Backend requests per 100 ms, %d clients, outage %v to %v</text>`+"\n", left, clients, outageStart, outageEnd)
	ox1, ox2 := x(int(outageStart/bucket)), x(int(outageEnd/bucket))
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#eee"/>`+"\n", ox1, top, ox2-ox1, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#888">outage</text>`+"\n", ox1+4, top+14)
	offered := float64(clients) * float64(bucket) / float64(time.Second)
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`+"\n", left, left+plotW, y(offered), y(offered))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555">offered</text>`+"\n", left+plotW-48, y(offered)-4)
	// Axes and ticks.
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left+plotW, top+plotH, top+plotH)
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left, top, top+plotH)
	for s := 0; time.Duration(s)*time.Second <= time.Duration(n-1)*bucket; s++ {
		xs := x(s * int(time.Second/bucket))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%ds</text>`+"\n", xs, top+plotH+16, s)
	}
	for _, v := range []float64{0, float64(peak) / 2, float64(peak)} {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	for i, o := range results {
		var pts []string
		for j := range n {
			v := 0
			if j < len(o.load) {
				v = o.load[j].Requests
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(j), y(float64(v))))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := top + 20 + float64(i)*22
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", w-right+20, w-right+44, ly, ly, c)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", w-right+50, ly+4, o.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
