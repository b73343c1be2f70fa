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
// second (10 s window), how long until the throttle refuses under 1% of
// the calls for 10 s in a row, by K. The closer K is to 1, the longer (at
// 1 it would never: refusals count as requests, and the share refused
// would stay where the outage left it, which is why K must be above 1).
func TestRecoveryTimeByK(t *testing.T) {
	for _, tc := range []struct {
		k        float64
		min, max time.Duration
	}{
		{2, 40 * time.Second, 3 * time.Minute},
		{1.5, 60 * time.Second, 4 * time.Minute},
		{1.1, 2 * time.Minute, 14 * time.Minute},
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
			var refusedPerSecond []int
			refused, n := 0, 0
			took := time.Duration(-1)
			for time.Since(back) < 15*time.Minute && took < 0 {
				if tk, err := th.Admit(); err == nil {
					th.Done(tk, nil)
				} else {
					refused++
				}
				if n++; n == rate {
					refusedPerSecond = append(refusedPerSecond, refused)
					if k := len(refusedPerSecond); k >= 10 {
						last := 0
						for _, r := range refusedPerSecond[k-10:] {
							last += r
						}
						if last*100 < 10*rate {
							took = time.Since(back) // 10 s in a row under 1% refused
						}
					}
					refused, n = 0, 0
				}
				time.Sleep(step)
			}
			t.Logf("K %v: under 1%% refused for 10 s in a row %v after the dependency came back", tc.k, took)
			assert.GreaterOrEqual(t, took, tc.min)
			assert.LessOrEqual(t, took, tc.max)
		})
	}
}
