package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r128Status struct{ code int }

func (e *r128Status) Error() string { return "status" }

// A breaker with FailIf (5xx are failures): a call whose caller hung up
// during the retry of a 503 must not count as a success (review127's
// first counting of the 503 made it one: FailIf saw the cancellation). It
// counts as FailIf judges the 503: a failure; after a 429, which FailIf
// does not take for one, it is left out, never a success.
func TestReview128FailIfCanceledRetry(t *testing.T) {
	for _, tc := range []struct {
		mid  bool
		code int
	}{{false, 503}, {true, 503}, {false, 429}, {true, 429}} {
		mid := tc.mid
		name := "in backoff"
		if mid {
			name = "in the retry"
		}
		t.Run(fmt.Sprint(name, " ", tc.code), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("r128", breaker.FailIf(func(err error) bool {
					var s *r128Status
					return errors.As(err, &s) && s.code >= 500
				}))
				p := pipeline.New(pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Second), retrypolicy.Jitter(retrypolicy.None))))
				ctx, cancel := context.WithCancel(t.Context())
				delay := 500 * time.Millisecond // in the backoff
				if mid {
					delay = 1500 * time.Millisecond // in the second attempt
				}
				time.AfterFunc(delay, cancel)
				n := 0
				_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n++; n == 1 {
						return 0, &r128Status{tc.code}
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				c := b.Counts()
				t.Logf("attempts %d err %v counts %+v", n, err, c)
				if c.TotalSuccesses != 0 {
					t.Fatalf("a call canceled by its caller after a 503 counted as a success: %+v", c)
				}
				if tc.code >= 500 && c.TotalFailures != 1 || tc.code < 500 && c.TotalExclusions != 1 {
					t.Errorf("want the %d counted as FailIf says (a failure, or left out): %+v", tc.code, c)
				}
			})
		})
	}
}
