package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r162Attempts struct {
	mu   sync.Mutex
	nums []int
	kind []resilience.EventKind
	errs []error
}

func (l *r162Attempts) OnEvent(e resilience.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case resilience.EventAttempt, resilience.EventRetry, resilience.EventLimited, resilience.EventRejected, resilience.EventWaitOpen:
		l.nums = append(l.nums, e.Attempt)
		l.kind = append(l.kind, e.Kind)
		l.errs = append(l.errs, e.Err)
	}
}

// A call's retries stopped by the breaker (another call opened it), the
// call waits and goes on: its attempts are numbered on, the mark reaches
// no event, and the attempt it sends once let through, as the half-open
// breaker's probe, is not charged to the quota: WaitWhenOpen's doc, "a
// call let through as one sends its one attempt uncharged" (the breaker
// bounds its probes).
func TestReview162WaitResumeNumberingAndQuota(t *testing.T) {
	for _, halfOpen := range []uint32{1, 3} {
		q := r162Quota()
		ev := &r162Attempts{}
		b := breaker.New("r162wait", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond), breaker.HalfOpenRequests(halfOpen))
		lim := limit.NewFixed(5)
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(2*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond), retrypolicy.WithQuota(q))),
			pipeline.WithLimit(lim), pipeline.WithListener(ev))
		before := q.Available()
		n := 0
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n++
			switch n {
			case 1:
				// Another call fails once: the breaker opens while this one runs.
				_, _ = pipeline.Do(context.Background(), pipeline.New(pipeline.WithBreaker(b)), func(context.Context) (int, error) { return 0, r162Transient })
				return 0, r162Transient
			}
			return 1, nil
		})
		if err != nil {
			t.Fatalf("halfOpen=%d: %v", halfOpen, err)
		}
		charged := before - q.Available()
		ev.mu.Lock()
		var attempts []int
		for i, k := range ev.kind {
			if k == resilience.EventAttempt {
				attempts = append(attempts, ev.nums[i])
			}
			if s := r162Marked(ev.errs[i]); s != "" {
				t.Errorf("event %v carries the mark %s", k, s)
			}
		}
		ev.mu.Unlock()
		t.Logf("halfOpen=%d: op ran %d times, quota charged %d, attempts told %v, events %v %v", halfOpen, n, charged, attempts, ev.kind, ev.nums)
		for i := 1; i < len(attempts); i++ {
			if attempts[i] <= attempts[i-1] {
				t.Errorf("halfOpen=%d: attempt numbers do not go on: %v", halfOpen, attempts)
			}
		}
		if n != 2 || charged != 0 {
			t.Errorf("halfOpen=%d: op ran %d times, quota charged %d: want 2 and none (the second is the breaker's probe)", halfOpen, n, charged)
		}
	}
}

// The breaker reopens as a retry waits for a slot of the limit: the retry
// is not sent, its charge goes back, the call waits, and the attempt it
// then sends, as the breaker's probe, is not charged (WaitWhenOpen's doc).
func TestReview162ReopenedInQueueRefunds(t *testing.T) {
	q := r162Quota()
	ev := &r162Attempts{}
	b := breaker.New("r162reopen", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond), breaker.HalfOpenRequests(3))
	lim := limit.NewFixed(1, limit.MaxWaiting(10))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond), retrypolicy.WithQuota(q))),
		pipeline.WithLimit(lim), pipeline.WithListener(ev))
	before := q.Available()
	n := 0
	var wg sync.WaitGroup
	defer wg.Wait()
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n++
		if n == 1 {
			// Another call takes the only slot as this attempt gives it
			// back, then fails: the breaker opens as this call's retry
			// waits in the queue.
			wg.Go(func() {
				_, _ = pipeline.Do(context.Background(), pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(lim)), func(context.Context) (int, error) {
					time.Sleep(20 * time.Millisecond)
					return 0, r162Transient
				})
			})
			time.Sleep(2 * time.Millisecond) // its call is in the breaker, queued for the slot
			return 0, r162Transient
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	charged := before - q.Available()
	t.Logf("op ran %d times, charged %d, events %v %v", n, charged, ev.kind, ev.nums)
	if n != 2 || charged != 0 {
		t.Errorf("op ran %d times, quota charged %d: want 2 and none (the refused retry's charge given back, the probe uncharged)", n, charged)
	}
	if err := errors.Join(ev.errs...); r162Marked(err) != "" {
		t.Errorf("mark in events")
	}
}
