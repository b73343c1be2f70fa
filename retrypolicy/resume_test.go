package retrypolicy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var (
	errDown = errors.New("down")
	errOpen = errors.New("breaker open")
)

// stoppedAfter runs DoGuarded with a guard that refuses the retry after
// attempt n (at its check number check: 1 before the delay, 2 after it),
// and returns the loop's error.
func stoppedAfter(t *testing.T, p *retrypolicy.Policy, n, check int) error {
	t.Helper()
	checks := 0
	_, err := retrypolicy.DoGuarded(context.Background(), p, func() error {
		checks++
		if checks == 2*(n-1)+check {
			return errOpen
		}
		return nil
	}, func(context.Context) (int, error) { return 0, errDown })
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, errOpen)
	require.Equal(t, n, re.Attempts)
	return err
}

// Resume goes on with a loop its guard stopped: MaxAttempts counts the
// attempts already made, which number on, and the quota pays for the
// refused retry once.
func TestResume(t *testing.T) {
	for _, tc := range []struct {
		name      string
		quota     *retrypolicy.Quota // nil: none
		stopAfter int                // attempts before the guard stopped the loop
		check     int                // the guard's check that stopped it: 1 before the delay, 2 after
		ok        int                // the attempt that succeeds; 0: none does
		sent      []int              // the attempts Resume sends, numbered as the listener hears
		reason    error              // why the resumed loop stopped; nil if it succeeded
		attempts  int                // its Error's Attempts
	}{
		{name: "the attempts left", stopAfter: 1, check: 1, sent: []int{2, 3}, reason: retrypolicy.ErrMaxAttempts, attempts: 3},
		{name: "stopped after the delay", stopAfter: 2, check: 2, sent: []int{3}, reason: retrypolicy.ErrMaxAttempts, attempts: 3},
		{name: "a success", stopAfter: 1, check: 1, ok: 2, sent: []int{2}},
		// A quota of one retry: the stopped retry had not taken it, so the
		// resumed one does, and the next is refused.
		{name: "quota pays for the refused retry", quota: retrypolicy.NewQuota(0, 0.1, 10*time.Second), stopAfter: 1, check: 1,
			sent: []int{2}, reason: retrypolicy.ErrQuotaExhausted, attempts: 2},
		// Stopped after the delay, the retry had taken the one and gave it
		// back: the resumed one takes it, and the next is refused.
		{name: "quota charge given back", quota: retrypolicy.NewQuota(0, 0.1, 10*time.Second), stopAfter: 1, check: 2,
			sent: []int{2}, reason: retrypolicy.ErrQuotaExhausted, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []retrypolicy.Option{retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0)}
			if tc.quota != nil {
				opts = append(opts, retrypolicy.WithQuota(tc.quota))
			}
			stopped := stoppedAfter(t, retrypolicy.New(opts...), tc.stopAfter, tc.check)

			var sent []int
			var retries []int
			listener := resilience.ListenerFunc(func(e resilience.Event) {
				switch e.Kind {
				case resilience.EventAttempt:
					sent = append(sent, e.Attempt)
				case resilience.EventRetry:
					retries = append(retries, e.Attempt)
				}
			})
			p := retrypolicy.New(append(opts, retrypolicy.WithListener(listener))...)
			res, err := retrypolicy.Resume(context.Background(), p, nil, stopped, func(context.Context) (int, error) {
				if len(sent)+tc.stopAfter+1 == tc.ok {
					return 7, nil
				}
				return 0, errDown
			})
			assert.Equal(t, tc.sent, sent, "attempts sent")
			if len(sent) > 0 {
				assert.Equal(t, tc.stopAfter, retries[0], "the refused retry, now made")
			}
			if tc.reason == nil {
				require.NoError(t, err)
				assert.Equal(t, 7, res)
				return
			}
			var re *retrypolicy.Error
			require.ErrorAs(t, err, &re)
			assert.ErrorIs(t, err, tc.reason)
			assert.ErrorIs(t, err, errDown)
			assert.Equal(t, tc.attempts, re.Attempts)
		})
	}
}

// Resume with anything but a guard's stop is DoGuarded: a loop that gave
// up for another reason, or no loop at all, starts from the first
// attempt.
func TestResumeOfAnotherErrorStartsAgain(t *testing.T) {
	p := retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))
	_, spent := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errDown })
	require.ErrorIs(t, spent, retrypolicy.ErrMaxAttempts)
	for _, stopped := range []error{nil, errDown, spent} {
		n := 0
		_, err := retrypolicy.Resume(context.Background(), p, nil, stopped, func(context.Context) (int, error) {
			n++
			return 0, errDown
		})
		assert.Equal(t, 2, n, "after %v", stopped)
		assert.ErrorIs(t, err, retrypolicy.ErrMaxAttempts)
	}
}

// Resume of a stopped loop whose context is done sends nothing, and counts
// the attempts made before.
func TestResumeWhenDone(t *testing.T) {
	p := retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(0))
	stopped := stoppedAfter(t, p, 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := retrypolicy.Resume(ctx, p, nil, stopped, func(context.Context) (int, error) {
		t.Error("an attempt sent after the caller canceled")
		return 0, nil
	})
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 2, re.Attempts)
	assert.ErrorIs(t, err, errDown)
}

// An attempt refused by what the guard guards, as it was about to be sent
// (its error of class rejected matches the guard's), is not counted and
// stops the loop as the guard would, and gives its retry's charge back:
// Resume sends it again under its own number, charged to the quota once.
func TestAnAttemptRefusedByTheGuardsStageIsAStop(t *testing.T) {
	quota := retrypolicy.NewQuota(0, 0.2, 10*time.Second) // 2 retries
	var sent []int
	listener := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventAttempt {
			sent = append(sent, e.Attempt)
		}
	})
	p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0), retrypolicy.WithQuota(quota), retrypolicy.WithListener(listener))
	before := quota.Available()
	open := false
	guard := func() error {
		if open {
			return errOpen
		}
		return nil
	}
	n := 0
	_, stopped := retrypolicy.DoGuarded(context.Background(), p, guard, func(context.Context) (int, error) {
		n++
		if n == 2 { // the breaker opened as this retry waited for a slot: refused, not sent
			open = true
			return 0, resilience.Rejected(errOpen)
		}
		return 0, errDown
	})
	var re *retrypolicy.Error
	require.ErrorAs(t, stopped, &re)
	assert.Equal(t, 1, re.Attempts, "the refused attempt is not counted")
	assert.ErrorIs(t, stopped, errOpen)
	assert.ErrorIs(t, stopped, errDown, "the last attempt sent")
	assert.Equal(t, []int{1}, sent)
	assert.Equal(t, before, quota.Available(), "the refused retry's charge given back")

	open = false
	_, err := retrypolicy.Resume(context.Background(), p, guard, stopped, func(context.Context) (int, error) {
		return 0, errDown
	})
	assert.Equal(t, []int{1, 2}, sent, "the refused retry sent under its number; then the bucket's one retry is spent")
	assert.ErrorIs(t, err, retrypolicy.ErrQuotaExhausted)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 2, re.Attempts)
	assert.Equal(t, before-1, quota.Available(), "the retry sent charged once")

	// A rejected error that the guard's does not match is an answer not to retry.
	_, err = retrypolicy.DoGuarded(context.Background(), p, func() error { return errOpen }, func(context.Context) (int, error) {
		return 0, resilience.Rejected(errDown)
	})
	assert.ErrorIs(t, err, retrypolicy.ErrNotRetryable)
}
