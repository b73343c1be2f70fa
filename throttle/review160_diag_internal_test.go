package throttle

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Trace of TestReview160LowKRecoveryAt1000's case (K 1.1, 1,000 calls a
// second, a 10 s outage, then 3% failing): the throttle's counts each
// second after the return, to see what holds the refusals. Asserts the
// same bound as K's doc: nothing refused 25 s after the return (2 to 13 s
// seen with 1 to 3% failing).
func TestReview160LowKTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New(K(1.1))
		errF := errors.New("503")
		rng := rand.New(rand.NewPCG(0, 3))
		var mu sync.Mutex
		start := time.Now()
		back := start.Add(10 * time.Second)
		var last time.Time
		var wg sync.WaitGroup
		nextLog := back
		for time.Since(start) < 40*time.Second {
			now := time.Now()
			if !now.Before(nextLog) && now.Before(back.Add(16*time.Second)) {
				e := th.clock.Now(&th.requests)
				t.Logf("+%2.0fs p=%.3f failing=%v req=%d acc=%d failed=%d refused=%d thinned=%d out=%d last2: acc=%d failed=%d",
					now.Sub(back).Seconds(), th.RejectProbability(), th.overloaded.Load(), th.requests.Sum(e), th.accept.Sum(e), th.failed.Sum(e),
					th.refused.Sum(e), th.thinned.Sum(e), th.out.Load(), th.accept.At(e)+th.accept.At(e-1), th.failed.At(e)+th.failed.At(e-1))
				nextLog = nextLog.Add(time.Second)
			}
			fail := now.Before(back) || rng.Float64() < 0.03
			wg.Go(func() {
				tk, err := th.Admit()
				if err != nil {
					if !now.Before(back) {
						mu.Lock()
						last = now
						mu.Unlock()
					}
					return
				}
				time.Sleep(10 * time.Millisecond)
				if fail {
					th.Done(tk, errF)
				} else {
					th.Done(tk, nil)
				}
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		if !last.IsZero() && last.Sub(back) > 25*time.Second {
			t.Errorf("last refusal %v after the return", last.Sub(back))
		}
	})
}
