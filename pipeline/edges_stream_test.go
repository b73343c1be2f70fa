package pipeline

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestDoStreamHedgeContexts(t *testing.T) {
	for _, hedgeWins := range []bool{true, false} {
		for _, timeout := range []time.Duration{0, time.Hour} {
			synctest.Test(t, func(t *testing.T) {
				p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
					WithRetry(retrypolicy.New()), WithTimeBudget(time.Hour), WithAttemptTimeout(timeout))
				var mu sync.Mutex
				ctxs := map[bool]context.Context{}
				res, release, err := DoStream(context.Background(), p, func(ctx context.Context) (string, error) {
					h := p.IsHedge(ctx)
					mu.Lock()
					ctxs[h] = ctx
					mu.Unlock()
					if h == hedgeWins {
						time.Sleep(15 * time.Millisecond)
						return "winner", nil
					}
					<-ctx.Done()
					return "loser", ctx.Err()
				})
				if err != nil || res != "winner" {
					t.Fatalf("hedgeWins=%v: %q %v", hedgeWins, res, err)
				}
				synctest.Wait()
				if e := ctxs[hedgeWins].Err(); e != nil {
					t.Errorf("hedgeWins=%v timeout=%v: the winner's context ended before release: %v", hedgeWins, timeout, e)
				}
				if e := ctxs[!hedgeWins].Err(); e == nil {
					t.Errorf("hedgeWins=%v timeout=%v: the loser's context still alive", hedgeWins, timeout)
				}
				release()
				if e := ctxs[hedgeWins].Err(); e == nil {
					t.Errorf("hedgeWins=%v timeout=%v: the winner's context alive after release", hedgeWins, timeout)
				}
				release()
			})
		}
	}
}

func TestDoStreamRetryContexts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
			WithTimeBudget(time.Hour), WithAttemptTimeout(time.Hour))
		var ctxs []context.Context
		_, release, err := DoStream(context.Background(), p, func(ctx context.Context) (int, error) {
			ctxs = append(ctxs, ctx)
			return 0, errTransient
		})
		if err == nil || len(ctxs) != 3 {
			t.Fatalf("%v %d", err, len(ctxs))
		}
		for i, c := range ctxs[:2] {
			if c.Err() == nil {
				t.Errorf("attempt %d's context alive after a later attempt ended", i+1)
			}
		}
		if ctxs[2].Err() != nil {
			t.Errorf("the last attempt's context ended before release, on error: %v", ctxs[2].Err())
		}
		release()
		release()
		if ctxs[2].Err() == nil {
			t.Error("alive after release")
		}
	})
}

var errTransient = errTransientT{}

type errTransientT struct{}

func (errTransientT) Error() string { return "transient" }
