package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errR104Unavailable = errors.New("503 unavailable")

// r104Spin runs workers that call again at once when refused (a worker
// taking the next job), through throttle -> fixed limit, against a
// dependency answering in 10 ms that fails bg of its attempts at random,
// and fails all of them in [blipFrom, blipTo). It returns the share of
// calls refused by the throttle in each second.
type r104Result struct {
	throttled [20]int64
	calls     [20]int64
	// a light background caller, one call every 20 ms, not a spinner
	bgThrottled [20]int64
	bgCalls     [20]int64
	bgOK        [20]int64
	sent        [20]int64
	ok          [20]int64
}

func r104Spin(t *testing.T, withLimit bool, withThrottle bool, bg float64, blipFrom, blipTo, spinUntil time.Duration) *r104Result {
	var res r104Result
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		var opts []pipeline.Option
		if withThrottle {
			opts = append(opts, pipeline.WithThrottle(th))
		}
		if withLimit {
			opts = append(opts, pipeline.WithLimit(limit.NewFixed(10)))
		}
		p := pipeline.New(opts...)
		start := time.Now()
		op := func(ctx context.Context) (int, error) {
			if sec := int(time.Since(start) / time.Second); sec < 20 {
				atomic.AddInt64(&res.sent[sec], 1)
			}
			time.Sleep(10 * time.Millisecond)
			el := time.Since(start)
			if el >= blipFrom && el < blipTo || rand.Float64() < bg {
				return 0, errR104Unavailable
			}
			return 1, nil
		}
		end := 20 * time.Second
		var wg sync.WaitGroup
		var stop atomic.Bool
		workers := 20
		if !withLimit {
			workers = 10
		}
		for range workers {
			wg.Go(func() {
				for !stop.Load() {
					el := time.Since(start)
					if el >= end || el >= spinUntil {
						return
					}
					_, err := pipeline.Do(context.Background(), p, op)
					sec := int(time.Since(start) / time.Second)
					if sec < 20 {
						atomic.AddInt64(&res.calls[sec], 1)
						if err == nil {
							atomic.AddInt64(&res.ok[sec], 1)
						}
						if errors.Is(err, throttle.ErrThrottled) {
							atomic.AddInt64(&res.throttled[sec], 1)
						}
					}
					if err != nil && (errors.Is(err, throttle.ErrThrottled) || errors.Is(err, limit.ErrLimited)) {
						time.Sleep(50 * time.Microsecond) // the next job at once
					}
				}
			})
		}
		wg.Go(func() {
			for time.Since(start) < end {
				_, err := pipeline.Do(context.Background(), p, op)
				sec := int(time.Since(start) / time.Second)
				if sec < 20 {
					atomic.AddInt64(&res.bgCalls[sec], 1)
					if err == nil {
						atomic.AddInt64(&res.bgOK[sec], 1)
					}
					if errors.Is(err, throttle.ErrThrottled) {
						atomic.AddInt64(&res.bgThrottled[sec], 1)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		wg.Wait()
	})
	return &res
}

func (r *r104Result) log(t *testing.T) {
	for s := range 20 {
		t.Logf("s%2d: spin %6d calls %6d throttled (%.1f%%) %5d ok; sent %5d; background %3d calls %3d throttled %3d ok",
			s, r.calls[s], r.throttled[s], 100*float64(r.throttled[s])/float64(max(r.calls[s], 1)), r.ok[s], r.sent[s], r.bgCalls[s], r.bgThrottled[s], r.bgOK[s])
	}
}

// A concurrency limit after the throttle, workers spinning on its
// refusals, a dependency with 5% of background failures, and an 800 ms
// blip at 3 s: with a 1 s window, nothing should be refused by the
// throttle from 2 windows after the blip on (as without the limit).
func TestReview104LimitSpinAfterBlip(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine simulation of figures in virtual time: run in .ci/run's pass without the race detector")
	}
	for _, withLimit := range []bool{false, true} {
		r := r104Spin(t, withLimit, true, 0.05, 3*time.Second, 3800*time.Millisecond, 20*time.Second)
		t.Logf("withLimit=%v", withLimit)
		r.log(t)
		var late, bgLate int64
		for s := 6; s < 20; s++ {
			late += r.throttled[s]
			bgLate += r.bgThrottled[s]
		}
		if bgLate > 0 {
			t.Errorf("withLimit=%v: the background caller had %d calls throttled 3 s or more after an 800 ms blip, against a healthy dependency (5%% failing)", withLimit, bgLate)
		}
		if late > 0 {
			t.Errorf("withLimit=%v: %d spinning calls throttled 3 s or more after the blip", withLimit, late)
		}
	}
}

// The spinners stop at 8 s: the light caller left alone must not be
// throttled a window (1 s) later.
func TestReview104LimitSpinThenStop(t *testing.T) {
	if raceEnabled {
		t.Skip("simulation in virtual time: run in .ci/run's pass without the race detector")
	}
	r := r104Spin(t, true, true, 0.05, 3*time.Second, 3800*time.Millisecond, 8*time.Second)
	r.log(t)
	var bgLate int64
	for s := 10; s < 20; s++ {
		bgLate += r.bgThrottled[s]
	}
	if bgLate > 0 {
		t.Errorf("the light caller had %d calls throttled 2 s or more after the spinners stopped", bgLate)
	}
}
