package throttle_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// slowClass is a caller's error (a 400) whose classification takes a
// moment, as a long chain or a goroutine preempted inside Done would.
type r85Slow struct{}

func (r85Slow) Error() string { return "400" }
func (r85Slow) ResilienceClass() resilience.Class {
	time.Sleep(time.Millisecond)
	return resilience.ClassPermanent
}

// Done takes the attempt out of "out" before it counts its accept: in
// between, the attempt is a request that is neither out nor accepted.
func TestReview85DoneOrderGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		for i := range 210 { // healthy: 200 accepts, 10 failures
			tk, _ := th.Admit()
			var e error
			if i%21 == 0 {
				e = errors.New("503")
			}
			th.Done(tk, e)
		}
		var tks []throttle.Ticket
		for range 1000 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatal("refused while healthy")
			}
			tks = append(tks, tk)
		}
		var wg sync.WaitGroup
		for _, tk := range tks {
			wg.Go(func() { th.Done(tk, r85Slow{}) })
		}
		time.Sleep(time.Millisecond / 2) // all inside Done, classifying
		p := th.RejectProbability()
		refused := 0
		for range 100 {
			if _, err := th.Admit(); err != nil {
				refused++
			}
		}
		wg.Wait()
		t.Logf("p %.2f mid-Done; %d of 100 refused; after: p %.2f", p, refused, th.RejectProbability())
		if refused > 0 {
			t.Errorf("healthy dependency (1000 answered 400s in flight): %d of 100 refused, p %.2f", refused, p)
		}
	})
}
