package throttle

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errOverloaded = errors.New("503")

// TestRejectProbabilityFollowsTheFormula: the probability is the book's
// formula, one accept assumed, over the requests the window counted:
// here, where the dependency fails of late, every refusal.
func TestRejectProbabilityFollowsTheFormula(t *testing.T) {
	tests := []struct {
		requests, accepts int
		k                 float64
	}{
		{100, 100, 2}, {100, 50, 2}, {100, 40, 2}, {100, 10, 2}, {100, 0, 2},
		{100, 60, 1.5}, {100, 0, 1.1}, {1000, 0, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d K=%v", tt.accepts, tt.requests, tt.k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := New(K(tt.k), Window(time.Second))
				accepts, sent := 0, 0
				for i := range tt.requests {
					tk, err := th.Admit()
					if err == nil {
						sent++
						if i < tt.accepts {
							accepts++
							th.Done(tk, nil)
						} else {
							th.Done(tk, errOverloaded)
						}
					}
					time.Sleep(time.Second / 2000)
				}
				e := th.clock.Now(&th.requests)
				req := int(th.requests.Sum(e))
				if th.failing(e) { // every refusal counted
					req += int(th.refused.Sum(e) - th.thinned.Sum(e))
				}
				assert.GreaterOrEqual(t, req, sent, "every attempt sent is a request")
				assert.LessOrEqual(t, req, tt.requests)
				want := max(0, (float64(req)-tt.k*float64(accepts+1))/float64(req+1))
				assert.InDelta(t, want, th.RejectProbability(), 1e-9)
			})
		})
	}
}

// TestARefusalCountsAtTheShareAdmitted: once the dependency accepts
// again, with failures still in the window, a refused attempt counts as
// a request with probability 1-p, p the probability it was refused with:
// the requests the refusals added are within five standard deviations of
// the sum of their 1-p.
func TestARefusalCountsAtTheShareAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New(Window(time.Minute))
		var tks []Ticket
		for range 1000 {
			tk, _ := th.Admit()
			tks = append(tks, tk)
		}
		for _, tk := range tks {
			th.Done(tk, errOverloaded)
		}
		time.Sleep(3 * th.clock.Bucket()) // the failures are in the window, not of late
		var want, variance float64
		refusals := 0
		for range 200000 {
			p := th.RejectProbability()
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, nil)
				continue
			}
			refusals++
			want += 1 - p
			variance += p * (1 - p)
		}
		e := th.clock.Now(&th.requests)
		require.False(t, th.failing(e))
		got := float64(th.thinned.Sum(e))
		t.Logf("%d refusals added %.0f requests; 1-p summed to %.0f", refusals, got, want)
		require.Greater(t, refusals, 1000)
		assert.InDelta(t, want, got, 5*math.Sqrt(variance))
		assert.Less(t, got, 0.9*float64(refusals), "not all of them")
	})
}
