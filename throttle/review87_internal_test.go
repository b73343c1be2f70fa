package throttle

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

type review87Panicky struct{}

func (review87Panicky) Error() string                     { return "panicky" }
func (review87Panicky) ResilienceClass() resilience.Class { panic("boom") }

// Every admitted attempt, whatever its answer (a panicking classifier
// included), is out until Done and no longer after: out ends at 0.
func TestReview87_OutBalanced(t *testing.T) {
	th := New()
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				tk, err := th.Admit()
				if err != nil {
					continue
				}
				var e error
				switch rand.IntN(5) {
				case 0:
					e = review87Panicky{}
				case 1:
					e = errors.New("x")
				case 2:
					e = resilience.Rejected(errors.New("r"))
				}
				th.Done(tk, e)
			}
		}()
	}
	wg.Wait()
	if o := th.out.Load(); o != 0 {
		t.Errorf("out %d after all Done", o)
	}
}
