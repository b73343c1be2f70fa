package redistest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// A real redis-server, healthy, and go-redis as the project's own tests
// configure it (ContextTimeoutEnabled). Callers whose own deadline (10 ms)
// is shorter than the command (BLPOP waiting 50 ms for a list that stays
// empty) end their attempts themselves: the adaptive limit must learn
// nothing from them (pipeline.WithLimit doc). Then healthy GETs, 8 at once,
// must not be refused.
func TestReview57RedisCallerDeadlinesShrinkLimit(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	l := limit.NewAIMD(limit.Initial(64), limit.Max(64))
	p := pipeline.New(pipeline.WithLimit(l))
	const n = 100
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := pipeline.Do(ctx, p, func(ctx context.Context) ([]string, error) {
			return c.BLPop(ctx, 50*time.Millisecond, "review57:empty").Result()
		})
		cancel()
		if err == nil || errors.Is(err, goredis.Nil) {
			t.Fatalf("call %d: %v", i, err)
		}
		if i == 0 {
			t.Logf("a caller-deadline error: %v", err)
		}
	}
	t.Logf("after %d callers' own 10 ms deadlines: limit %d (from 64)", n, l.Limit())
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
				v, err := c.Get(ctx, "review57:k").Result()
				if errors.Is(err, goredis.Nil) {
					err = nil
				}
				time.Sleep(10 * time.Millisecond) // the caller's own work on the answer, within the attempt
				return v, err
			})
			errs <- err
		}()
	}
	refused := 0
	for i := 0; i < 8; i++ {
		if errors.Is(<-errs, limit.ErrLimited) {
			refused++
		}
	}
	if l.Limit() < 64 || refused > 0 {
		t.Errorf("callers' own deadlines shrank the limit to %d; then %d of 8 healthy calls refused with ErrLimited", l.Limit(), refused)
	}
}
