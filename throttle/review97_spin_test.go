package throttle_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r97limited = resilience.Rejected(errors.New("concurrency limit reached"))

// Worker loops that call again at once on a refusal, of the throttle or of
// the concurrency limit behind it (pipeline.WithLimit without a queue: an
// attempt the limit refuses is taken back from the throttle's requests).
// The doc: "Thinned, the refusals add about p requests for each attempt
// sent, however fast the caller repeats, and once the failures are out of
// the window the throttle refuses nothing". Here each attempt the throttle
// lets through is mostly refused by the limit and taken back, so the
// thinned refusals add p requests for each attempt the throttle admits,
// not each one sent, and feed themselves as the full count did.
func TestReview97SpinOnALimitKeepsRefusing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		const workers, slots = 8, 2
		var inUse atomic.Int64
		start := time.Now()
		blipEnd := start.Add(30 * time.Millisecond)
		var stop atomic.Bool
		var admitted, refused, sent [40]atomic.Int64 // per 100 ms
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					i := min(int(time.Since(start)/(100*time.Millisecond)), 39)
					tk, err := th.Admit()
					if err != nil {
						refused[i].Add(1)
						time.Sleep(100 * time.Microsecond) // the next job
						continue
					}
					admitted[i].Add(1)
					if inUse.Add(1) > slots {
						inUse.Add(-1)
						th.Done(tk, r97limited) // the limit refused it: not sent
						time.Sleep(100 * time.Microsecond)
						continue
					}
					sent[i].Add(1)
					var outcome error
					if time.Now().Before(blipEnd) {
						outcome = errors.New("503")
					}
					time.Sleep(5 * time.Millisecond)
					th.Done(tk, outcome)
					inUse.Add(-1)
				}
			}()
		}
		// Another caller of the same dependency shares the throttle (one
		// Throttle serves every call to one dependency), without the limit:
		// 100 calls a second, open loop, each answered in 5 ms.
		var otherRefused, otherCalls atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				time.Sleep(10 * time.Millisecond)
				if time.Since(start) < 2*time.Second {
					continue
				}
				otherCalls.Add(1)
				tk, err := th.Admit()
				if err != nil {
					otherRefused.Add(1)
					continue
				}
				wg.Go(func() { time.Sleep(5 * time.Millisecond); th.Done(tk, nil) })
			}
		}()
		time.Sleep(4 * time.Second)
		stop.Store(true)
		wg.Wait()
		for i := 0; i < 40; i += 5 {
			t.Logf("%4v: %6d admitted by the throttle, %5d sent, %6d refused by the throttle, p %.3f", time.Duration(i)*100*time.Millisecond, admitted[i].Load(), sent[i].Load(), refused[i].Load(), th.RejectProbability())
		}
		// From 2 s on (the blip's failures left the 1 s window long ago),
		// the throttle should refuse nothing.
		var a, r int64
		for i := 20; i < 40; i++ {
			a += admitted[i].Load()
			r += refused[i].Load()
		}
		t.Logf("the other caller, 2 s to 4 s: %d of %d calls refused", otherRefused.Load(), otherCalls.Load())
		if otherRefused.Load() > 0 {
			t.Errorf("a caller sharing the throttle, without the limit, had %d of %d calls to a healthy dependency refused, 2 s to 4 s after a 30 ms blip (1 s window)", otherRefused.Load(), otherCalls.Load())
		}
		if r > 0 {
			t.Errorf("2 s to 4 s after a 30 ms blip (1 s window), a healthy dependency: the throttle refused %d of %d attempts (%.1f%%)", r, a+r, 100*float64(r)/float64(a+r))
		}
	})
}
