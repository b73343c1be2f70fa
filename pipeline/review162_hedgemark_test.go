package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call that sent a hedge in its first attempt (Hedged), whose retry then
// waits in the limit's queue until the caller's deadline: the retry was
// not sent, its charge goes back (markHedged keeps the mark outermost),
// the error says Hedged and the deadline, and carries no mark.
func TestReview162HedgedThenUnsentRetryRefunds(t *testing.T) {
	q := r162Quota()
	ev := &r162Events{}
	tr := &r162Tracer{}
	lim := limit.NewFixed(4, limit.MaxWaiting(10))
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond), retrypolicy.WithQuota(q))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithLimit(lim),
		pipeline.WithListener(ev),
		pipeline.WithTracer(tr),
	)
	release := make(chan struct{})
	var holders sync.WaitGroup
	defer func() { close(release); holders.Wait() }()
	var once sync.Once
	before := q.Available()
	var mu sync.Mutex
	firsts, hedges := 0, 0
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
		mu.Lock()
		if p.IsHedge(ctx) {
			hedges++
		} else {
			firsts++
		}
		mu.Unlock()
		if p.IsHedge(ctx) {
			once.Do(func() { // take both slots as this race gives them back, for good
				for range 4 {
					holders.Go(func() {
						tk, err := lim.Acquire(context.Background())
						if err != nil {
							return
						}
						<-release
						lim.Release(tk, nil)
					})
				}
			})
			time.Sleep(3 * time.Millisecond)
			return 0, r162Transient
		}
		time.Sleep(10 * time.Millisecond)
		return 0, r162Transient
	})
	charged := before - q.Available()
	t.Logf("firsts %d hedges %d charged %d err %v; events %v", firsts, hedges, charged, err, ev.counts)
	if hedges == 0 {
		t.Skip("no hedge sent")
	}
	if firsts != 1 {
		t.Fatalf("first attempts sent %d, want 1 (the retry waits for a slot)", firsts)
	}
	if charged != 0 {
		t.Errorf("quota charged %d for a retry never sent", charged)
	}
	if !pipeline.Hedged(err) {
		t.Errorf("Hedged(err) false: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline lost: %v", err)
	}
	if s := r162Marked(err); s != "" {
		t.Errorf("mark leaked: %s", s)
	}
	if resilience.Classify(err) == resilience.ClassTransient && r162Marked(err) != "" {
		t.Error("marked")
	}
	ev.check(t)
	if len(tr.leaks) > 0 {
		t.Errorf("tracer: %v", tr.leaks)
	}
}
