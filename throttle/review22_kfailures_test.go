package throttle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/throttle"
)

var errOverload = errors.New("503") // transient by default: a failure

// The package doc: "one accept assumed beside those counted ..., so that
// the first failures of a window, before any accept, refuse nothing: a
// lone failure, or a few stale connections reset at once, is not an
// overload"; the code: "K of them refuse nothing"; and "a burst to a
// healthy dependency is not taken for refusals". K failures (or, with a K
// under 2, a lone one), then calls out at once to the same, now healthy,
// dependency: the attempts out are counted among the accepts at the rate
// 1/(failures+1), below 1/K, and the throttle refuses; its refusals count
// as requests, and the probability climbs with the burst.
func TestReview22KFailuresThenABurstRefusesNothing(t *testing.T) {
	for _, tc := range []struct {
		k        float64
		failures int
	}{{2, 1}, {2, 2}, {1.5, 1}, {1.1, 1}} {
		t.Run(fmt.Sprintf("K%v_%d_failures", tc.k, tc.failures), func(t *testing.T) {
			th := throttle.New(throttle.K(tc.k))
			for range tc.failures {
				tk, err := th.Admit()
				require.NoError(t, err)
				th.Done(tk, errOverload)
			}
			require.Zero(t, th.RejectProbability(), "the failures alone refuse nothing")
			var tickets []throttle.Ticket
			refused := 0
			for range 100 {
				tk, err := th.Admit()
				if errors.Is(err, throttle.ErrThrottled) {
					refused++
					continue
				}
				tickets = append(tickets, tk)
			}
			t.Logf("K %v, %d failure(s), then 100 calls out at once: %d refused; p now %.3f", tc.k, tc.failures, refused, th.RejectProbability())
			assert.Zero(t, refused, "a burst to a healthy dependency after %d failure(s): refused", tc.failures)
			for _, tk := range tickets {
				th.Done(tk, nil)
			}
		})
	}
}
