package throttle_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r85Fail = errors.New("503")

// r85Run sends rate attempts a second for d, each answered at once with
// errf(i); it returns attempts refused and sent.
func r85Run(th *throttle.Throttle, rate int, d time.Duration, errf func() error) (refused, sent int) {
	gap := time.Second / time.Duration(rate)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		tk, err := th.Admit()
		if err != nil {
			refused++
		} else {
			sent++
			th.Done(tk, errf())
		}
		time.Sleep(gap)
	}
	return
}

// Fewer than 10 answers in the window: nothing refused, however many requests.
func TestReview85FewAnswersNothingRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		for range 9 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatal(err)
			}
			th.Done(tk, r85Fail)
		}
		// a burst of 10,000 attempts, still out (no answer yet)
		var tks []throttle.Ticket
		for i := range 10000 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatalf("attempt %d refused with 9 answers in the window (p=%v)", i, th.RejectProbability())
			}
			tks = append(tks, tk)
		}
		for _, tk := range tks {
			th.Done(tk, context.Canceled)
		}
	})
}

// A healthy dependency failing 10%, 25%, 35% at random: no refusals in 120 s at 500/s.
func TestReview85HealthyNoRefusals(t *testing.T) {
	for _, f := range []float64{0.01, 0.10, 0.25, 0.35} {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			refused, sent := r85Run(th, 500, 120*time.Second, func() error {
				if rand.Float64() < f {
					return r85Fail
				}
				return nil
			})
			t.Logf("fail %.2f: refused %d of %d", f, refused, refused+sent)
			if refused > 0 && f <= 0.25 {
				t.Errorf("fail %.2f: %d refused of %d", f, refused, refused+sent)
			}
		})
	}
}

// Healthy with latency: many concurrent goroutines, each attempt takes
// 200ms, 5% fail; bursts of 2000 at once every 3 s over a base load.
func TestReview85HealthyBurstsWithLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		var refused, sent atomic.Int64
		one := func() {
			tk, err := th.Admit()
			if err != nil {
				refused.Add(1)
				return
			}
			sent.Add(1)
			time.Sleep(time.Duration(50+rand.IntN(300)) * time.Millisecond)
			var e error
			if rand.Float64() < 0.05 {
				e = r85Fail
			}
			th.Done(tk, e)
		}
		var wg sync.WaitGroup
		end := time.Now().Add(60 * time.Second)
		wg.Go(func() {
			for time.Now().Before(end) {
				wg.Go(one)
				time.Sleep(5 * time.Millisecond)
			}
		})
		wg.Go(func() {
			for time.Now().Before(end) {
				time.Sleep(3 * time.Second)
				for range 2000 {
					wg.Go(one)
				}
			}
		})
		wg.Wait()
		t.Logf("refused %d of %d", refused.Load(), refused.Load()+sent.Load())
		if refused.Load() > 0 {
			t.Errorf("refused %d attempts to a healthy dependency", refused.Load())
		}
	})
}

// Caller's errors never teach refusals: 100% of 400s, cancellations,
// rejections, panicking errors.
type r85PanicErr struct{ p *int }

func (e *r85PanicErr) Error() string                     { return "x" }
func (e *r85PanicErr) ResilienceClass() resilience.Class { _ = *e.p; return 0 }

func TestReview85CallerErrorsTeachNothing(t *testing.T) {
	var nilp *r85PanicErr
	for name, e := range map[string]error{
		"400":      resilience.Permanent(errors.New("400")),
		"canceled": context.Canceled,
		"rejected": resilience.Rejected(errors.New("bad url")),
		"panicky":  &r85PanicErr{},
		"typednil": nilp,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				// with some real failures so the shortcut is off
				for range 20 {
					tk, _ := th.Admit()
					th.Done(tk, r85Fail)
				}
				time.Sleep(11 * time.Second)
				refused, sent := r85Run(th, 1000, 20*time.Second, func() error { return e })
				if refused > 0 {
					t.Errorf("%s: refused %d of %d", name, refused, refused+sent)
				}
			})
		})
	}
}

// After a busy healthy period (some failures), a long idle, then a burst.
func TestReview85IdleThenBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		// busy: every goes up to 64
		r85Run(th, 5000, 10*time.Second, func() error {
			if rand.Float64() < 0.3 {
				return r85Fail
			}
			return nil
		})
		for _, idle := range []time.Duration{5 * time.Second, 9500 * time.Millisecond, 11 * time.Second, time.Hour, 24 * 3650 * time.Hour} {
			time.Sleep(idle)
			var tks []throttle.Ticket
			refused := 0
			for range 3000 {
				tk, err := th.Admit()
				if err != nil {
					refused++
					continue
				}
				tks = append(tks, tk)
			}
			for _, tk := range tks {
				th.Done(tk, nil)
			}
			if refused > 0 {
				t.Errorf("idle %v: burst of 3000 refused %d", idle, refused)
			}
			// then steady healthy with 30% failures, for 20 s
			refused2, sent := r85Run(th, 2000, 20*time.Second, func() error {
				if rand.Float64() < 0.3 {
					return r85Fail
				}
				return nil
			})
			if refused2 > 0 {
				t.Errorf("idle %v: then refused %d of %d", idle, refused2, refused2+sent)
			}
		}
	})
}

// Traffic drops from busy to sparse (every stays high): accepts and
// failures land in different buckets?
func TestReview85RateDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		errf := func() error {
			if rand.Float64() < 0.3 {
				return r85Fail
			}
			return nil
		}
		total, tsent := 0, 0
		for range 5 {
			r85Run(th, 10000, 5*time.Second, errf)
			for _, rate := range []int{50, 20, 5} {
				refused, sent := r85Run(th, rate, 15*time.Second, errf)
				total += refused
				tsent += sent
			}
		}
		t.Logf("refused %d of %d", total, total+tsent)
		if total > 0 {
			t.Errorf("refused %d of %d after rate drops, 30%% failing", total, total+tsent)
		}
	})
}

// Options.
func TestReview85Options(t *testing.T) {
	for _, k := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1.09, 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("K(%v) did not panic", k)
				}
			}()
			throttle.K(k)
		}()
	}
	for _, d := range []time.Duration{0, -1, 9 * time.Millisecond, math.MinInt64} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Window(%v) did not panic", d)
				}
			}()
			throttle.Window(d)
		}()
	}
	// extremes that are allowed must work
	for _, o := range [][]throttle.Option{
		{throttle.K(1.1)}, {throttle.K(math.MaxFloat64)}, {throttle.Window(math.MaxInt64)},
		{throttle.Window(10 * time.Millisecond)}, {throttle.Window(11 * time.Millisecond)}, {nil},
	} {
		th := throttle.New(o...)
		for range 100 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, r85Fail)
			}
		}
		p := th.RejectProbability()
		if math.IsNaN(p) || p < 0 || p > 1 {
			t.Errorf("%v: p = %v", o, p)
		}
		t.Logf("opts %v: p after 100 failures = %v", o, p)
	}
	var nilT *throttle.Throttle
	if tk, err := nilT.Admit(); err != nil || tk != 0 {
		t.Error("nil admit")
	}
	nilT.Done(0, nil)
	if nilT.RejectProbability() != 0 {
		t.Error("nil p")
	}
}

// Real concurrency: healthy (5% fail), GOMAXPROCS goroutines hammering
// with no latency; then bursts from 2000 goroutines released at once.
func TestReview85ConcurrentHealthyRealTime(t *testing.T) {
	th := throttle.New()
	var refused, sent atomic.Int64
	one := func() {
		tk, err := th.Admit()
		if err != nil {
			refused.Add(1)
			return
		}
		sent.Add(1)
		var e error
		if rand.IntN(20) == 0 {
			e = r85Fail
		}
		runtime.Gosched()
		th.Done(tk, e)
	}
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				one()
			}
		})
	}
	for time.Now().Before(deadline) {
		gate := make(chan struct{})
		var bw sync.WaitGroup
		for range 2000 {
			bw.Go(func() { <-gate; one() })
		}
		close(gate)
		bw.Wait()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("refused %d of %d", refused.Load(), refused.Load()+sent.Load())
	if refused.Load() > 0 {
		t.Errorf("refused %d of %d to a healthy dependency (5%% failing)", refused.Load(), refused.Load()+sent.Load())
	}
}
