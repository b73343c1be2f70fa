package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r136State struct {
	Breakers []struct {
		Name                          string
		Requests, Successes, Failures uint32
		Series                        struct{ Successes, Failures, Rejections []uint64 }
	}
	Pipelines []struct {
		Name                                                     string
		Calls, Successes, Failures, Rejected, Throttled, Limited uint64
		Series                                                   struct{ Successes, Failures, Rejections []uint64 }
	}
}

func r136Get(t *testing.T, h *dashboard.Handler) r136State {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://localhost/debug/resilience/api/state", nil))
	if w.Code != 200 {
		t.Fatalf("api/state: %d %s", w.Code, w.Body)
	}
	var s r136State
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func sum(xs []uint64) (n uint64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// TestReview136DashboardFiguresMatchRegistry: the JSON endpoint's figures
// are the registry's (pipelines) and the breaker's own (breakers), and a
// pipeline's series add up to its totals.
func TestReview136DashboardFiguresMatchRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("503")
		b := breaker.New("dep", breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6))
		reg := registry.New(registry.Interval(time.Second, 60))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithName("p"),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Second), retrypolicy.Jitter(retrypolicy.None))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))))
		if err != nil {
			t.Fatal(err)
		}
		h := dashboard.New(reg)
		ok := func(context.Context) (int, error) { return 1, nil }
		fail := func(context.Context) (int, error) { return 0, boom }
		for range 5 {
			pipeline.Do(t.Context(), p, ok)
		}
		pipeline.Do(t.Context(), p, fail) // fails 3 times, over 4 s
		// A call that fails, is looked at in its backoff, then succeeds.
		var n atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
				if n.Add(1) == 1 {
					return 0, boom
				}
				return 1, nil
			})
		}()
		time.Sleep(1500 * time.Millisecond)
		mid := r136Get(t, h)
		if f := mid.Pipelines[0].Failures; f > 2 {
			t.Errorf("mid-call failures %d, want at most 2", f)
		}
		<-done
		time.Sleep(1500 * time.Millisecond)
		s := r136Get(t, h)
		snap := reg.Snapshot()
		ps, jp := snap.Pipelines[0], s.Pipelines[0]
		if jp.Calls != ps.Calls || jp.Successes != ps.Successes || jp.Failures != ps.Failures || jp.Rejected != ps.Rejected {
			t.Errorf("JSON %+v, registry %+v", jp, ps)
		}
		bc := b.Snapshot().Counts
		jb := s.Breakers[0]
		if jb.Successes != bc.TotalSuccesses || jb.Failures != bc.TotalFailures || jb.Requests != bc.Requests {
			t.Errorf("JSON breaker %+v, breaker %+v", jb, bc)
		}
		t.Logf("pipeline: calls %d S %d F %d series S %v F %v; breaker S %d F %d series S %v F %v",
			jp.Calls, jp.Successes, jp.Failures, jp.Series.Successes, jp.Series.Failures,
			jb.Successes, jb.Failures, jb.Series.Successes, jb.Series.Failures)
		if jp.Successes != 6 || jp.Failures != 1 {
			t.Errorf("want S=6 F=1, got S=%d F=%d", jp.Successes, jp.Failures)
		}
		// The sparklines are the totals spread over the intervals: a
		// call that succeeded on its retry is no failure in them.
		if sum(jp.Series.Failures) != jp.Failures || sum(jp.Series.Successes) != jp.Successes {
			t.Errorf("pipeline series sum S %d F %d, totals S %d F %d", sum(jp.Series.Successes), sum(jp.Series.Failures), jp.Successes, jp.Failures)
		}
		if sum(jb.Series.Failures) != uint64(jb.Failures) {
			t.Errorf("breaker tile: series failures %d, its count of failures %d", sum(jb.Series.Failures), jb.Failures)
		}
		runtime.KeepAlive(p) // the registry holds it weakly: collected, it leaves the page
	})
}

// TestReview136DashboardTileAndTableOnA400: a 400 (permanent) is a
// failure in the pipeline's table and sparkline, a success in the tile of
// the breaker built on it; the tile's sparkline is the pipeline's.
func TestReview136DashboardTileAndTableOnA400(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6))
		reg := registry.New(registry.Interval(time.Second, 60))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithName("p")))
		if err != nil {
			t.Fatal(err)
		}
		h := dashboard.New(reg)
		r136Get(t, h)
		for range 10 {
			pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, resilience.Permanent(errors.New("400")) })
		}
		time.Sleep(1100 * time.Millisecond)
		s := r136Get(t, h)
		jb, jp := s.Breakers[0], s.Pipelines[0]
		t.Logf("tile: S %d F %d sparkline F %v; table: S %d F %d", jb.Successes, jb.Failures, jb.Series.Failures, jp.Successes, jp.Failures)
		// Documented (docs/dashboard.md): the tile's counts are the
		// breaker's, its sparklines the pipelines'. They then disagree: a
		// 400 is a success for the breaker, a failure for the registry.
		if jb.Successes != 10 || jb.Failures != 0 || jp.Failures != 10 || sum(jb.Series.Failures) != sum(jp.Series.Failures) {
			t.Errorf("tile S %d F %d (sparkline F %d); table F %d (sparkline F %d)", jb.Successes, jb.Failures,
				sum(jb.Series.Failures), jp.Failures, sum(jp.Series.Failures))
		}
		runtime.KeepAlive(p)
	})
}

// TestReview136SparklineOfRetriedSuccesses: every call fails once and
// succeeds on its retry; a page is open (a snapshot each interval). No
// call failed: the totals say 0 failures, and so must the sparklines.
func TestReview136SparklineOfRetriedSuccesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6))
		reg := registry.New(registry.Interval(time.Second, 120))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithName("p"),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(700*time.Millisecond), retrypolicy.Jitter(retrypolicy.Full)))))
		if err != nil {
			t.Fatal(err)
		}
		h := dashboard.New(reg)
		stop := make(chan struct{})
		go func() { // the open page
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
					r136Get(t, h)
				}
			}
		}()
		for i := range 200 {
			go func() {
				time.Sleep(time.Duration(i) * 300 * time.Millisecond)
				var n atomic.Int32
				pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
					if n.Add(1) == 1 {
						return 0, errors.New("503")
					}
					return 1, nil
				})
			}()
		}
		time.Sleep(70 * time.Second)
		close(stop)
		synctest.Wait()
		time.Sleep(time.Second)
		s := r136Get(t, h)
		jp, jb := s.Pipelines[0], s.Breakers[0]
		t.Logf("table: S %d F %d; sparkline F sum %d: %v; tile F %d sparkline F sum %d",
			jp.Successes, jp.Failures, sum(jp.Series.Failures), jp.Series.Failures, jb.Failures, sum(jb.Series.Failures))
		if jp.Failures != 0 || jb.Failures != 0 {
			t.Fatalf("failures counted: %d, %d", jp.Failures, jb.Failures)
		}
		if sum(jp.Series.Failures) != 0 || sum(jb.Series.Failures) != 0 {
			t.Errorf("no call failed, yet the sparklines show %d (pipeline) and %d (breaker) failures", sum(jp.Series.Failures), sum(jb.Series.Failures))
		}
		runtime.KeepAlive(p) // the registry holds it weakly: collected, it leaves the page
	})
}
