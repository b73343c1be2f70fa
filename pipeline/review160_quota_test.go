package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errReview160Blip = errors.New("review160: 503")

// A retry that the concurrency limit refuses is never sent. The quota is a
// cap on retries sent ("retries may number at most ratio times the calls";
// WaitWhenOpen's doc: "each retry is charged to its Quota as it is sent"),
// and the loop gives back a retry the breaker refused at the gates. Does
// it give back one that the limit refused?
func TestReview160RetryRefusedByLimitIsNotChargedToQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second) // 10 a window, 1 a bucket (1 s)
		lim := limit.NewFixed(1)
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None), retrypolicy.WithQuota(q))),
			pipeline.WithLimit(lim),
		)
		before := q.Available()
		release := make(chan struct{})
		var wg sync.WaitGroup
		// Call B: its first attempt fails at once; its retry comes 10 ms later.
		var errB error
		wg.Go(func() {
			_, errB = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				return 0, errReview160Blip
			})
		})
		// Call A takes the slot while B backs off, and holds it.
		time.Sleep(5 * time.Millisecond)
		wg.Go(func() {
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				<-release
				return 1, nil
			})
		})
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if !errors.Is(errB, limit.ErrLimited) {
			t.Fatalf("setup: B's retry should have been refused by the limit, got %v", errB)
		}
		after := q.Available()
		close(release)
		wg.Wait()
		if after != before {
			t.Errorf("quota available %d before, %d after a retry that the limit refused (never sent): the refused retry was charged", before, after)
		}
		// The harm: call C, in the same second, against a healthy
		// dependency that a plain retry completes, finds the quota spent.
		n := 0
		_, errC := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n++; n == 1 {
				return 0, errReview160Blip
			}
			return 1, nil
		})
		if errC != nil {
			t.Errorf("call C, whose one blip a retry fixes, failed: %v (no retry had been sent in this bucket)", errC)
		}
	})
}

// Same with the throttle refusing the retry.
func TestReview160RetryRefusedByThrottleIsNotChargedToQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1, 10*time.Second)
		th := throttle.New()
		// Make the throttle refuse: 30 failures, no accept.
		for range 30 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, errReview160Blip)
			}
		}
		if th.RejectProbability() < 0.9 {
			t.Fatalf("setup: p = %v", th.RejectProbability())
		}
		p := pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None), retrypolicy.WithQuota(q))),
			pipeline.WithThrottle(th),
		)
		charged, sent := 0, 0
		for range 200 {
			before := q.Available()
			n := 0
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				n++
				return 0, errReview160Blip
			})
			sent += n
			_ = err
			if n == 1 && errors.Is(err, throttle.ErrThrottled) && q.Available() < before {
				charged++
			}
			time.Sleep(time.Second) // a bucket each, so the allowance is back
		}
		if charged > 0 {
			t.Errorf("%d calls had their retry refused by the throttle (never sent) and charged to the quota", charged)
		}
	})
}
