package breaker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Differential: a core that forgets (a shared breaker's replica going
// alone) against a plain core fed only the run of failures or successes
// that ended the window (in the same buckets: same start and age) and
// the calls after. Their states, counts and trips must agree.
func TestReview141ForgetAgreesWithLocal(t *testing.T) {
	for seed := uint64(0); seed < review141Seeds(); seed++ {
		synctest.Test(t, func(t *testing.T) {
			if msg := forgetScenario(seed); msg != "" {
				t.Fatalf("seed %d: %s", seed, msg)
			}
		})
	}
}

func forgetScenario(seed uint64) string {
	rnd := rand.New(rand.NewPCG(seed, 141))
	bucketsN := []int{1, 2, 3, 6}[rnd.IntN(4)]
	window := time.Duration(1+rnd.IntN(10)) * time.Second
	period := window / time.Duration(bucketsN)
	consecutive := uint32(3 + rnd.IntN(4))
	rate, rateMin := 0.5, uint32(1+rnd.IntN(8))
	alone := false
	trip := func(n Counts) bool {
		if n.ConsecutiveFailures >= consecutive {
			return true
		}
		if alone {
			done := uint64(n.TotalSuccesses) + uint64(n.TotalFailures)
			return done >= uint64(rateMin) && float64(n.TotalFailures) >= rate*float64(done)
		}
		return false
	}
	nop := func(from, to resilience.State) {}
	a := newCore(1, 100*time.Millisecond, window, bucketsN, trip, nop)
	var b *core
	var runKind outcome = excluded
	reset := func() {
		b = newCore(1, 100*time.Millisecond, window, bucketsN, trip, nop)
		a.mu.Lock()
		b.start, b.age = a.start, a.age
		a.mu.Unlock()
	}
	reset()
	pFail := rnd.Float64() * 0.6
	forgetAt := 5 + rnd.IntN(60)
	var log []string
	for i := 0; i < 200; i++ {
		// time between calls: from nothing to past a bucket
		time.Sleep(time.Duration(rnd.Int64N(int64(period) * 3 / 2)))
		if i == forgetAt {
			if a.State() != resilience.StateClosed {
				return "" // not closed as it goes alone: nothing to compare
			}
			a.forget(func() bool { return true })
			alone = true
			if runKind == excluded { // no run: b is fresh
				reset()
			}
			// The run counts in the run of failures, not in the rate
			// (review142): b leaves out the same run, which a kept.
			a.mu.Lock()
			b.mu.Lock()
			b.kept, b.keptN, b.keptBad = append([]uint32(nil), a.kept...), a.keptN, a.keptBad
			b.mu.Unlock()
			a.mu.Unlock()
			ca, cb := a.Counts(), b.Counts()
			// Requests of b counts the run's admissions; a's too.
			if ca != cb {
				return fmt.Sprintf("after forget (buckets %d window %v): forget %+v local %+v\n%v", bucketsN, window, ca, cb, log)
			}
		}
		o := counted
		if rnd.Float64() < pFail {
			o = failed
		}
		took := time.Duration(rnd.Int64N(int64(period)))
		if alone && rnd.IntN(10) == 0 {
			took = time.Duration(rnd.Int64N(int64(window) * 2)) // outlasts the window at times
		}
		if !alone && o != runKind {
			// the run breaks: the local breaker starts from this call
			if a.State() == resilience.StateClosed {
				reset()
			}
		}
		log = append(log, fmt.Sprintf("%d:%v at %v took %v", i, o, time.Duration(monotimeNowForTest()), took))
		va, aa := a.admit()
		vb, ab := b.admit()
		time.Sleep(took)
		if va == admitted {
			a.done(aa, o)
		}
		if vb == admitted {
			b.done(ab, o)
		}
		runKind = o
		if !alone {
			if a.State() != resilience.StateClosed {
				return "" // tripped before going alone: skip
			}
			continue
		}
		_ = 0
		if va != vb {
			return fmt.Sprintf("call %d: verdicts differ: forget %v local %v (buckets %d window %v)\n%v", i, va, vb, bucketsN, window, log)
		}
		ca, cb := a.Counts(), b.Counts()
		sa, sb := a.State(), b.State()
		if sa != sb {
			return fmt.Sprintf("call %d: states differ: forget %v %+v local %v %+v (buckets %d window %v)\n%v", i, sa, ca, sb, cb, bucketsN, window, log)
		}
		if ca.ConsecutiveSuccesses > ca.TotalSuccesses || ca.ConsecutiveFailures > ca.TotalFailures || ca.Requests > 1<<30 {
			return fmt.Sprintf("call %d: counts broken %+v", i, ca)
		}
		if sa == resilience.StateClosed && ca != cb {
			return fmt.Sprintf("call %d: counts differ: forget %+v local %+v (buckets %d window %v)\n%v", i, ca, cb, bucketsN, window, log)
		}
	}
	return ""
}

func monotimeNowForTest() int64 { return int64(monotime.Now()) }

func review141Seeds() uint64 {
	if s := os.Getenv("REVIEW141_SEEDS"); s != "" {
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	return 400
}
