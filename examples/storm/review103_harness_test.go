package main

import (
	"testing"
	"time"
)

// review103Run is a result of sc's calls, all on schedule and ok, except
// that the last `moved` calls of second sec start `delay` later than due.
func review103Run(sc *scenario, sec, moved int, delay time.Duration) result {
	n := int(sc.until * time.Duration(sc.rate) / time.Second)
	r := result{strategy: "x", sc: sc, calls: make([]outcome, n), late: make([]time.Duration, n)}
	for i := range n {
		at := time.Duration(i) * time.Second / time.Duration(sc.rate)
		idx := i - sec*sc.rate
		if idx >= sc.rate-moved && idx < sc.rate {
			late := delay - time.Duration(idx-(sc.rate-moved))*time.Second/time.Duration(sc.rate)
			r.late[i] = late
			at += late
		}
		r.calls[i] = outcome{start: at, end: at + 10*time.Millisecond, ok: true}
	}
	return r
}

// -maxshort 0.05 refuses "only [a run] whose offered load fell more than
// 5% short" (README): a run exactly 5% short in one second (20 of 400
// calls moved 50 ms into the next) is not "more than 5%" short.
func TestReview103MaxShortExactlyFivePercent(t *testing.T) {
	sc := scenarioByKey("outage")
	exact := review103Run(sc, 3, 20, 50*time.Millisecond)
	if short := exact.offeredShort(); short > 0.05 {
		t.Logf("offeredShort = %.20f", short)
	}
	if late, why := behind([]result{exact}, 0.05); late {
		t.Errorf("20 of 400 calls (5.0%%) moved 50 ms: refused as more than 5%% short: %s", why)
	}
	over := review103Run(sc, 3, 24, 60*time.Millisecond)
	if late, why := behind([]result{over}, 0.05); !late {
		t.Errorf("24 of 400 calls (6%%) moved: reported: %s", why)
	}
}
