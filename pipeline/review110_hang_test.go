package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review110HangRun drives callers with budget d, one every every, into a
// pipeline with a breaker and limit l, against a dependency that hangs;
// it reports whether the breaker opened within dur, and the outcomes.
func review110HangRun(t *testing.T, l *limit.Limiter, d, every, dur time.Duration) (opened bool, counts string) {
	b := breaker.New("hang")
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(l))
	hang := func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(dur)
	var mu sync.Mutex
	var maxFail uint32
	var excl uint32
	for time.Now().Before(stop) && !opened {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, _ = pipeline.Do(ctx, p, hang)
			c := b.Counts()
			mu.Lock()
			maxFail = max(maxFail, c.ConsecutiveFailures)
			excl = max(excl, c.TotalExclusions)
			mu.Unlock()
		}()
		time.Sleep(every)
		if b.State() != resilience.StateClosed {
			opened = true
		}
	}
	wg.Wait()
	return opened, fmt.Sprintf("max consecutive failures %d, max exclusions %d", maxFail, excl)
}

// A dependency that hangs must open the breaker ("a dependency that hangs
// opens it through the calls that had more"): callers with a 400 ms
// budget have four times the 100 ms floor. Attempts queue at the limit.
func TestReview110HangOldestOnTimeOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(1000), limit.OldestOnTime())
		opened, counts := review110HangRun(t, l, 400*time.Millisecond, 10*time.Millisecond, 60*time.Second)
		if !opened {
			t.Errorf("breaker never opened against a dependency that hangs, callers with 400 ms each, limit 1 + OldestOnTime, 60 s: %s", counts)
		}
	})
}

func TestReview110HangFIFOOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Default queue order (no OldestOnTime): 200 ms callers, 20 a second.
		l := limit.NewFixed(1, limit.MaxWaiting(1000))
		opened, counts := review110HangRun(t, l, 200*time.Millisecond, 50*time.Millisecond, 60*time.Second)
		if !opened {
			t.Errorf("breaker never opened against a dependency that hangs, callers with 200 ms each, 20/s, limit 1 FIFO, 60 s: %s", counts)
		}
	})
}

func TestReview110HangAIMDOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(4), limit.MaxWaiting(1000), limit.OldestOnTime())
		opened, counts := review110HangRun(t, l, 400*time.Millisecond, 5*time.Millisecond, 60*time.Second)
		if !opened {
			t.Errorf("breaker never opened against a dependency that hangs, callers with 400 ms each, AIMD 4 + OldestOnTime, 60 s: %s", counts)
		}
	})
}
