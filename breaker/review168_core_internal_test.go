package breaker

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review168: the smallest reproduction of the rebase by a long call. A
// core whose dependency answers every call in 2 s (a call admitted every
// 100 ms, answered 2 s later), and one call admitted at the start and
// answered 90 s later. Right after that answer, a call admitted 1 s before
// whose 1 s deadline ends is no longer excused (cutShort false): the
// answers of the last 80 s were forgotten.
func TestReview168CoreLongCallForgetsSlowAnswers(t *testing.T) {
	review168CoreLong(t, 0, 900)
}

// The same with a call of 72.5 s (admitted at 9.99 s, at the end of the
// first span, answered at 82.5 s): the comment says a call admitted
// longer ago than the spans kept (80 s) rebases; 70 s and a bit can.
func TestReview168CoreCallOf72sHeld(t *testing.T) {
	review168CoreLong(t, 9990*time.Millisecond, 825)
}

// review168CoreLong: a call admitted at longAt is answered at tick
// answerTick (of 100 ms).
func review168CoreLong(t *testing.T, longAt time.Duration, answerTick int) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(1, 100*time.Millisecond, time.Minute, 6, func(Counts) bool { return false }, func(from, to resilience.State) {})
		var long admission
		var pending []admission
		unexcused := 0
		for i := 0; i < answerTick+50; i++ {
			tick := time.Duration(i+1) * 100 * time.Millisecond
			if longAt > 0 && longAt < tick && longAt >= tick-100*time.Millisecond {
				time.Sleep(longAt - (tick - 100*time.Millisecond))
				_, long = c.admit()
				time.Sleep(tick - longAt)
			} else {
				time.Sleep(100 * time.Millisecond)
			}
			if i == 0 && longAt == 0 {
				_, long = c.admit()
			}
			_, a := c.admit()
			pending = append(pending, a)
			// answer those admitted 2 s ago
			for len(pending) > 0 && monotime.Since(pending[0].at) >= 2*time.Second {
				c.done(pending[0], counted)
				pending = pending[1:]
			}
			if i == answerTick-1 {
				t.Logf("the long call is answered after %v", monotime.Since(long.at))
				c.done(long, counted)
			}
			// a caller admitted 1 s ago, with a 1 s budget, ended by its deadline
			at := monotime.Now() - monotime.Reading(time.Second)
			if i > 30 && !c.cutShort(at, time.Second) {
				unexcused++
				if unexcused == 1 {
					t.Logf("first unexcused deadline failure at %v", tick)
				}
			}
		}
		if unexcused > 0 {
			t.Fatalf("%d deadline failures of 1 s budgets not excused on a dependency answering every call in 2 s (one call answered after %v)", unexcused, time.Duration(answerTick)*100*time.Millisecond-longAt)
		}
	})
}

// Control: same without the long call.
func TestReview168CoreSteadyExcuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(1, 100*time.Millisecond, time.Minute, 6, func(Counts) bool { return false }, func(from, to resilience.State) {})
		var pending []admission
		unexcused := 0
		for i := 0; i < 1500; i++ { // 150 s
			time.Sleep(100 * time.Millisecond)
			_, a := c.admit()
			pending = append(pending, a)
			for len(pending) > 0 && monotime.Since(pending[0].at) >= 2*time.Second {
				c.done(pending[0], counted)
				pending = pending[1:]
			}
			at := monotime.Now() - monotime.Reading(time.Second)
			if i > 30 && !c.cutShort(at, time.Second) {
				unexcused++
			}
		}
		if unexcused > 0 {
			t.Fatalf("%d deadline failures not excused in steady state", unexcused)
		}
	})
}
