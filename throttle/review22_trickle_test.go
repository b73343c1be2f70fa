package throttle_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// A dependency that refuses everything, quickly or after a hang, still
// gets only a trickle; once back, the throttle lets calls through again.
func TestReview22DeadDependencyIsShedAndRecovered(t *testing.T) {
	for _, conc := range []int{1, 50} {
		th := throttle.New(throttle.Window(time.Second))
		fail := errors.New("503")
		start := time.Now()
		sent, refused := 0, 0
		// conc attempts out at once, each answered 503 after 2 ms: 2 s.
		for time.Since(start) < 2*time.Second {
			var tks []throttle.Ticket
			for range conc {
				tk, err := th.Admit()
				if err != nil {
					refused++
					continue
				}
				sent++
				tks = append(tks, tk)
			}
			time.Sleep(2 * time.Millisecond)
			for _, tk := range tks {
				th.Done(tk, fail)
			}
		}
		lastSent := 0
		s2 := time.Now()
		for time.Since(s2) < time.Second { // the last window of the outage
			tk, err := th.Admit()
			if err == nil {
				lastSent++
				th.Done(tk, fail)
			}
			time.Sleep(200 * time.Microsecond)
		}
		// Back: how long until a refusal rate under 1%?
		back := time.Now()
		var recovered time.Duration
		for time.Since(back) < 10*time.Second && recovered == 0 {
			if th.RejectProbability() < 0.01 {
				recovered = time.Since(back)
				break
			}
			for range conc {
				tk, err := th.Admit()
				if err == nil {
					th.Done(tk, nil)
				}
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("conc %d: outage: %d sent, %d refused; last window sent %d; recovered (<1%% refused) after %v", conc, sent, refused, lastSent, recovered)
		assert.Less(t, lastSent, 100, "a dead dependency gets a trickle")
		assert.NotZero(t, recovered, "recovers")
	}
}
