package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

func review46Sum(xs []uint64) (s uint64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// Sparklines after pauses of any length: the points a snapshot adds hold
// the counts since the last point, and the series never holds more than
// Points points; over a run, the points added sum to the totals.
func TestReview46_SeriesAfterPauses(t *testing.T) {
	for _, points := range []int{1, 2, 5, 7} {
		t.Run(fmt.Sprint("points=", points), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const interval = time.Second
				reg := registry.New(registry.Interval(interval, points))
				p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("p")))
				if err != nil {
					t.Fatal(err)
				}
				ok := func(context.Context) (int, error) { return 1, nil }
				bad := func(context.Context) (int, error) { return 0, errors.New("x") }
				var addedS, addedF uint64
				lastPoint := time.Now()
				pauses := []time.Duration{0, interval / 2, interval, interval / 2, interval / 2, 2 * interval,
					time.Duration(points) * interval, time.Duration(points+1) * interval, time.Duration(points-1) * interval,
					3 * interval / 2, 10 * time.Duration(points) * interval, 1000 * time.Hour, interval, interval * 5 / 2}
				for i, pause := range pauses {
					calls := 3*i + 1
					for j := 0; j < calls; j++ {
						_, _ = pipeline.Do(context.Background(), p, ok)
						if j%3 == 0 {
							_, _ = pipeline.Do(context.Background(), p, bad)
						}
					}
					time.Sleep(pause)
					s := reg.Snapshot()
					ps := s.Pipelines[0]
					k := int(min(time.Since(lastPoint)/interval, time.Duration(points)))
					if k > 0 {
						lastPoint = time.Now()
					}
					if n := len(ps.Series.Successes); n > points || n != len(ps.Series.Failures) {
						t.Fatalf("pause %v: %d points, capacity %d", pause, n, points)
					}
					n := len(ps.Series.Successes)
					if k > n {
						t.Fatalf("pause %v: %d points expected to be added, series has %d", pause, k, n)
					}
					addedS += review46Sum(ps.Series.Successes[n-k:])
					addedF += review46Sum(ps.Series.Failures[n-k:])
					if k > 0 && (addedS != ps.Successes || addedF != ps.Failures) {
						t.Errorf("pause %v (k=%d): points added sum to %d successes, %d failures; totals %d, %d; series %v",
							pause, k, addedS, addedF, ps.Successes, ps.Failures, ps.Series.Successes)
					}
					if k > 0 && ps.CallsPerSec <= 0 {
						t.Errorf("pause %v: rate %v", pause, ps.CallsPerSec)
					}
				}
			})
		})
	}
}
