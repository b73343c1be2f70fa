package throttle_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// "whatever p, the first attempt of a bucket (a tenth of the window) in
// which none was sent goes through, so that the throttle hears within a
// bucket that the dependency is back". In a pipeline the throttle's
// admission comes before the concurrency limit: a bucket's probe that the
// limit then refuses is taken back (Done with the pipeline's mark of an
// attempt not sent), and nothing was sent in the bucket. Does another
// attempt of that bucket go through?
func TestReview160ProbeTakenBackLeavesBucketSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		for range 2000 {
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, errR160)
			}
		}
		silent := 0
		for b := range 20 {
			time.Sleep(time.Second) // a new bucket; the window still holds failures
			// The first attempt of the bucket: the probe.
			tk, err := th.Admit()
			if err != nil {
				t.Fatalf("bucket %d: first attempt refused (p %v)", b, th.RejectProbability())
			}
			th.Done(tk, classify.Unsent(context.Canceled)) // the limit refused it: the pipeline tells the throttle so (gates.go's errNotSent)
			sent := false
			for range 20 {
				if tk, err := th.Admit(); err == nil {
					sent = true
					th.Done(tk, errR160) // still down
					break
				}
			}
			if !sent {
				silent++
			}
		}
		if silent > 2 {
			t.Errorf("%d of 20 buckets sent nothing: the probe the limit refused was taken back, and no other attempt of the bucket went through", silent)
		}
	})
}
