package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestEachOutcomeIsCountedAsItShouldBe: with K 1.25, 10 accepted
// attempts, then 10 ending with the outcome under test, then 10 failures
// (a refusal counts as a failure does: a request, not accepted), the
// probability (requests - K*(accepts+1)) / (requests + 1) tells how the
// outcome was counted: an answer (a success, a 400) is an accept (30
// requests, 20 accepts: 3.75/31); a failure of the dependency (a 500, a
// 503, a timeout) is a request only (30, 10: 16.25/31); an attempt the
// caller canceled or that was not sent after all is taken back (20, 10:
// 6.25/21). A join is counted by the class it carries, wherever in the
// join that is.
func TestEachOutcomeIsCountedAsItShouldBe(t *testing.T) {
	const (
		accepted = 3.75 / 31
		failed   = 16.25 / 31
		takeBack = 6.25 / 21
	)
	overload := errors.New("503 service unavailable")
	for _, tc := range []struct {
		name string
		err  error
		want float64
	}{
		{"a success", nil, accepted},
		{"a 400", resilience.Permanent(errors.New("400 bad request")), accepted},
		{"a 400 joined after a plain error", errors.Join(errors.New("body: read"), resilience.Permanent(errors.New("400"))), accepted},
		{"a 500", resilience.Terminal(errors.New("500 internal server error")), failed},
		{"a 503", overload, failed},
		{"a timeout", fmt.Errorf("attempt: %w", context.DeadlineExceeded), failed},
		{"a 503 joined with a plain error", errors.Join(errors.New("close"), overload), failed},
		{"canceled by the caller", fmt.Errorf("get: %w", context.Canceled), takeBack},
		{"canceled, joined after a plain error", errors.Join(errors.New("close"), context.Canceled), takeBack},
		{"not sent: refused by a later stage", resilience.Rejected(errors.New("breaker open")), takeBack},
		{"not sent: refused, joined after a plain error", errors.Join(errors.New("close"), resilience.Rejected(errors.New("breaker open"))), takeBack},
		{"not sent: another throttle's refusal", throttle.ErrThrottled, takeBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New(throttle.K(1.25))
				// All sent before any answer, so that none is refused.
				var tks []throttle.Ticket
				for range 30 {
					tk, err := th.Admit()
					require.NoError(t, err)
					tks = append(tks, tk)
				}
				for i, tk := range tks {
					th.Done(tk, []error{nil, tc.err, overload}[i/10])
				}
				assert.InDelta(t, tc.want, th.RejectProbability(), 1e-9)
			})
		})
	}
}
