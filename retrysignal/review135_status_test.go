package retrysignal_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type r135Ctx struct {
	context.Context
	dl time.Time
}

func (c r135Ctx) Deadline() (time.Time, bool) { return c.dl, true }

type r135Status struct{ code int }

func (e r135Status) Error() string   { return http.StatusText(e.code) }
func (e r135Status) HTTPStatus() int { return e.code }

// A dependency's 404 (permanent) or 409 in progress (pending) that came
// as the deadline passed by the clock, before the context heard: the
// status the caller's caller is told is the same with or without a retry
// stage: the dependency's 404 (an answer not retried stands), and 504 for
// the 409, which the retry stage would retry had it time: out of time, no
// final answer came.
func TestReview135StatusAtDeadline(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusConflict} {
		for _, mode := range []string{"retry", "single", "bare"} {
			t.Run(http.StatusText(code)+"/"+mode, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var opts []pipeline.Option
					var copts []pipeline.CallOption
					if mode != "bare" {
						opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
					}
					if mode == "single" {
						copts = append(copts, pipeline.SingleAttempt())
					}
					p := pipeline.New(opts...)
					want := error(r135Status{code})
					if code == http.StatusConflict {
						want = resilience.Pending(want)
					} else {
						want = resilience.Permanent(want)
					}
					ctx := r135Ctx{context.Background(), time.Now().Add(10 * time.Millisecond)}
					_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) {
						time.Sleep(20 * time.Millisecond)
						return 0, want
					}, copts...)
					t.Logf("R135 %d %s: %d %v", code, mode, retrysignal.Status(err), err)
					wantStatus := code
					if code == http.StatusConflict {
						wantStatus = http.StatusGatewayTimeout
					}
					if got := retrysignal.Status(err); got != wantStatus {
						t.Errorf("%d %s: Status %d, want %d (err %v, Is DeadlineExceeded %v)", code, mode, got, wantStatus, err, errors.Is(err, context.DeadlineExceeded))
					}
				})
			})
		}
	}
}
