package throttle_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestRecoveryTimeByK holds K's doc: after a 30 s outage at 1,000 calls a
// second (10 s window), how long the throttle goes on refusing calls to
// the dependency that is back, and how many, by K. It refuses nearly all
// until the attempt it lets through each bucket (a second here) is
// accepted; from then on the refusals count at the share let through,
// and soon it refuses nothing.
func TestRecoveryTimeByK(t *testing.T) {
	for _, tc := range []struct {
		k       float64
		max     time.Duration
		refused int // at most
	}{
		{2, 2 * time.Second, 2000},
		{1.5, 2 * time.Second, 2000},
		{1.1, 10 * time.Second, 4000},
	} {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New(throttle.K(tc.k))
			const rate = 1000
			step := time.Second / rate
			fail := errors.New("503")
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(step) {
				if tk, err := th.Admit(); err == nil {
					th.Done(tk, fail)
				}
			}
			back := time.Now()
			var last time.Duration
			refused := 0
			for time.Since(back) < 2*time.Minute {
				if tk, err := th.Admit(); err == nil {
					th.Done(tk, nil)
				} else {
					refused++
					last = time.Since(back)
				}
				time.Sleep(step)
			}
			t.Logf("K %v: the last call refused %v after the dependency came back; %d refused", tc.k, last, refused)
			assert.LessOrEqual(t, last, tc.max)
			assert.LessOrEqual(t, refused, tc.refused)
		})
	}
}
