package throttle

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFailingOfLateAtItsBounds: with K 2, the dependency becomes failing
// of late once the last fifth of the window holds more than one failure
// an accept and two more (3 failures and no accept, not 2), stays so with
// no answer there, and stops once it holds an accept and at most half a
// failure an accept (2 accepts and 1 failure).
func TestFailingOfLateAtItsBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New(K(2), Window(time.Second))
		answer := func(err error) {
			t.Helper()
			tk, aerr := th.Admit()
			require.NoError(t, aerr, "nothing refused under 10 answers")
			th.Done(tk, err)
		}
		now := func() int64 { return th.clock.Now(&th.requests) }
		answer(errOverloaded)
		answer(errOverloaded)
		assert.False(t, th.failing(now()), "2 failures, no accept: not more than 2")
		answer(errOverloaded)
		assert.True(t, th.failing(now()), "3 failures, no accept")

		time.Sleep(300 * time.Millisecond) // the last fifth (two buckets of 100 ms) empty
		assert.True(t, th.failing(now()), "no answer: as it was")
		answer(errOverloaded)
		answer(nil)
		assert.True(t, th.failing(now()), "1 accept, 1 failure: over half a failure an accept")
		answer(nil)
		assert.False(t, th.failing(now()), "2 accepts, 1 failure: half a failure an accept")
	})
}
