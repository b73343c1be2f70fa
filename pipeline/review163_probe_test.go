package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errFail163 = errors.New("503: overloaded")

// pump163 drives th to refuse at p near 1: failures, then refusals
// (counted as requests while the dependency is failing).
func pump163(t *testing.T, th *throttle.Throttle, refusals int) {
	t.Helper()
	for range 40 + refusals {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, errFail163)
		}
	}
	if p := th.RejectProbability(); p < 0.99 {
		t.Fatalf("setup: p = %v", p)
	}
}

// At p near 1, the bucket's probe is sent to a hanging dependency and its
// caller's deadline ends it (it reached the dependency). Then the limit
// is full (another user of the limiter holds its slot): the attempts the
// throttle's draw lets through are refused by the limit, not sent. Once
// the limit has room again, in the same bucket, the next call must not
// be let through as a second probe: the bucket's probe was sent.
func TestReview163SentProbeThenFullLimitNoSecondProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New() // 10 s window: 1 s buckets
		lim := limit.NewFixed(1)
		p := New(WithThrottle(th), WithLimit(lim))
		pump163(t, th, 2_000)
		time.Sleep(time.Second) // a fresh bucket

		var sent atomic.Int64
		hang := func(ctx context.Context) (int, error) {
			sent.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		}
		// A: the bucket's probe, to a hanging dependency, caller deadline 100 ms.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			Do(ctx, p, hang)
		}()
		synctest.Wait()
		if sent.Load() != 1 {
			t.Fatalf("setup: the bucket's first call was not sent (%d)", sent.Load())
		}
		time.Sleep(200 * time.Millisecond) // A's deadline ended it: sent, then canceled
		synctest.Wait()

		// The limit full, by another user of it.
		slot, err := lim.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		limited, throttled := 0, 0
		for range 20_000 {
			_, err := Do(context.Background(), p, func(context.Context) (int, error) {
				sent.Add(1)
				return 0, errFail163
			})
			switch {
			case errors.Is(err, limit.ErrLimited):
				limited++
			case errors.Is(err, throttle.ErrThrottled):
				throttled++
			default:
				t.Fatalf("unexpected: %v", err)
			}
			if limited >= 3 {
				break
			}
		}
		if limited == 0 {
			t.Skip("setup: the draw let nothing through to the full limit")
		}
		lim.Release(slot, nil)
		if sent.Load() != 1 {
			t.Fatalf("sent %d while the limit was full", sent.Load())
		}
		// The limit has room again, same bucket: 10 calls to a dependency that fails.
		before := sent.Load()
		for range 10 {
			Do(context.Background(), p, func(context.Context) (int, error) {
				sent.Add(1)
				return 0, errFail163
			})
		}
		t.Logf("limit refused %d trickle attempts, throttle %d; then %d of 10 calls sent (p=%.5f)", limited, throttled, sent.Load()-before, th.RejectProbability())
		if sent.Load()-before > 0 {
			t.Errorf("a second attempt reached the dependency in the bucket whose probe was already sent (and canceled by its caller): %d of 10 sent at p≈1", sent.Load()-before)
		}
	})
}

// Control: the bucket's probe refused by the full limit; once the limit
// has room, the bucket still gets its probe (the promise of review160).
func TestReview163ProbeRefusedByLimitStillComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		lim := limit.NewFixed(1)
		p := New(WithThrottle(th), WithLimit(lim))
		pump163(t, th, 2_000)
		time.Sleep(time.Second)
		slot, _ := lim.Acquire(context.Background())
		var sent atomic.Int64
		op := func(context.Context) (int, error) { sent.Add(1); return 0, errFail163 }
		limited := 0
		for range 50 {
			if _, err := Do(context.Background(), p, op); errors.Is(err, limit.ErrLimited) {
				limited++
			}
		}
		if limited == 0 {
			t.Fatal("the bucket's probe did not reach the limit")
		}
		lim.Release(slot, nil)
		for range 10 {
			Do(context.Background(), p, op)
		}
		if sent.Load() != 1 {
			t.Errorf("sent %d in the bucket once the limit had room, want its 1 probe", sent.Load())
		}
	})
}
