package throttle_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestAnIdleThrottleIsReadExactlyByItsNextAttempt: while the throttle
// refuses nothing, saying so reads no clock (the hot path is atomic loads
// only), so after an idle gap its probability is what its last reading
// of the clock left it: here 0, accepts older than the window still
// counted. Only the next attempt's reading moves the window on, and from
// then on the probability is exact: at most one attempt is judged on the
// stale window.
//
// A window of 1 s has buckets of 100 ms: 10 accepted attempts at 0 s, 12
// failed at 0.9 s (each counted there: while attempts are rare, each
// reads the clock before it is counted), and at 1 s the accepts are out
// of the window.
func TestAnIdleThrottleIsReadExactlyByItsNextAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		for range 10 {
			tk, err := th.Admit()
			require.NoError(t, err)
			th.Done(tk, nil)
		}
		time.Sleep(900 * time.Millisecond)
		for range 12 {
			tk, err := th.Admit()
			require.NoError(t, err)
			th.Done(tk, errOverloaded)
		}
		time.Sleep(100 * time.Millisecond)
		assert.Zero(t, th.RejectProbability(), "the last reading's window: 22 requests, 10 accepts")
		_, err := th.Admit() // out: counted as accepted at the rate of the answered, 0 of 12, one accept assumed beside them
		require.NoError(t, err, "judged on the last reading")
		assert.InDelta(t, (13-2*(1+1.0/13))/14, th.RejectProbability(), 1e-9, "read exactly: 13 requests in the window, 12 failures, none accepted, and 1 out")
	})
}
