package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A context kept from a call that timed out, then others reuse the memory.
func TestZRevKeptTimedOutContext(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))), WithAttemptTimeout(2*time.Millisecond),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	var kept []context.Context
	_, err := Do(context.WithValue(context.Background(), zrevKey{}, 1), p, func(ctx context.Context) (int, error) {
		kept = append(kept, ctx)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, ErrAttemptTimeout) {
		t.Fatalf("err %v", err)
	}
	for i := 2; i < 100; i++ {
		Do(context.WithValue(context.Background(), zrevKey{}, i), p, func(ctx context.Context) (int, error) {
			ctx.Done()
			return i, nil
		})
	}
	for n, ctx := range kept {
		if v := ctx.Value(zrevKey{}); v != 1 {
			t.Errorf("attempt %d: value %v", n+1, v)
		}
		if context.Cause(ctx) != ErrAttemptTimeout || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("attempt %d: err %v cause %v", n+1, ctx.Err(), context.Cause(ctx))
		}
	}
	if len(kept) != 2 {
		t.Errorf("%d attempts", len(kept))
	}
}
