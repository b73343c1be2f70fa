package pipeline

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Inside a bubble: the budget's and the attempt's deadlines are exact on
// the bubble's clock, Done fires at them, and causes are right.
func TestReview3SynctestDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithTimeBudget(time.Second), WithAttemptTimeout(300*time.Millisecond),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(10), retrypolicy.BaseDelay(0))))
		start := time.Now()
		var dls []time.Time
		var ends []time.Duration
		var causes []error
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			d, _ := ctx.Deadline()
			dls = append(dls, d)
			<-ctx.Done()
			ends = append(ends, time.Since(start))
			causes = append(causes, context.Cause(ctx))
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v", err)
		}
		want := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond, time.Second}
		if len(ends) != len(want) {
			t.Fatalf("ends %v", ends)
		}
		for i := range want {
			if ends[i] != want[i] || !dls[i].Equal(start.Add(want[i])) {
				t.Errorf("attempt %d: ended at %v, deadline %v; want %v", i+1, ends[i], dls[i].Sub(start), want[i])
			}
		}
		if causes[0] != ErrAttemptTimeout || causes[3] != context.DeadlineExceeded {
			t.Errorf("causes %v", causes)
		}
		// A nested pipeline sees the outer budget as its caller's deadline.
		inner := New(WithTimeBudget(2 * time.Second))
		outer := New(WithTimeBudget(500 * time.Millisecond))
		start = time.Now()
		_, _ = Do(context.Background(), outer, func(ctx context.Context) (int, error) {
			return Do(ctx, inner, func(ctx context.Context) (int, error) {
				d, _ := ctx.Deadline()
				if !d.Equal(start.Add(500 * time.Millisecond)) {
					t.Errorf("inner deadline %v after start, want 500ms", d.Sub(start))
				}
				<-ctx.Done()
				if time.Since(start) != 500*time.Millisecond {
					t.Errorf("inner done at %v", time.Since(start))
				}
				return 0, nil
			})
		})
		// A deadline far past the bubble's start: 300 years.
		far := New(WithTimeBudget(time.Duration(math.MaxInt64)))
		_, _ = Do(context.Background(), far, func(ctx context.Context) (int, error) {
			if ctx.Err() != nil {
				t.Errorf("far budget: Err %v at once", ctx.Err())
			}
			d, ok := ctx.Deadline()
			if !ok || d.Before(time.Now().Add(100*365*24*time.Hour)) {
				t.Errorf("far budget: deadline %v", d)
			}
			return 0, nil
		})
	})
}
