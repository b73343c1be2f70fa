package throttle

import (
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// formula is probability without its first check: the book's formula
// over the window, as probability computes it once something failed.
func (t *Throttle) formula(e int64) float64 {
	req, acc := float64(t.requests.Sum(e)), float64(t.accept.Sum(e))
	refused := float64(t.refused.Sum(e))
	if t.failing(e) {
		req += max(0, refused-float64(t.thinned.Sum(e)))
	}
	out := min(max(0, float64(t.out.Load())), req)
	failed := float64(t.failed.Sum(e))
	if acc+failed < minAnswers && refused <= acc+failed {
		return 0
	}
	acc++
	rate := acc / (acc + failed)
	return max(0, (req-t.k*(acc+out*rate))/(req+1))
}

// With nothing failed or refused in the window, the formula is 0, so
// probability may answer 0 without reading the rest: whatever the attempts
// in flight, canceled, accepted, spread over the window and past it, and
// whatever K, over random runs that go through outages and recoveries.
func TestNoFailureNorRefusalMeansNoRefusal(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			th := New(K([]float64{1.1, 1.5, 2, 3}[seed%4]), Window(time.Second))
			var out []Ticket
			fail := errors.New("503")
			failing := false
			checked := 0
			for step := range 20000 {
				if step%2000 == 0 {
					failing = r.IntN(2) == 0 // outages come and go
				}
				switch k := r.IntN(10); {
				case k < 5:
					if tk, err := th.Admit(); err == nil {
						out = append(out, tk)
					}
				case len(out) > 0:
					i := r.IntN(len(out))
					tk := out[i]
					out = append(out[:i], out[i+1:]...)
					var err error
					switch {
					case k == 9:
						err = resilience.Rejected(errors.New("not sent"))
					case failing && k > 5:
						err = fail
					}
					th.Done(tk, err)
				}
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
				e := th.clock.Now(&th.requests)
				if th.failed.Sum(e) == 0 && th.refused.Sum(e) == 0 {
					checked++
					require.Zero(t, th.formula(e), "step %d", step)
				}
			}
			require.Positive(t, checked)
		})
	}
}
