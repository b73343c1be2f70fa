package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var err134Unavailable = errors.New("503 service unavailable")

// review134: a dead dependency: the first attempt hangs (a black-holed
// instance), the hedge gets a 503 at once, in time; the caller hangs up
// after that 503 came back. The race's failure came before its context
// ended: it is the dependency's answer, and the breaker must count it.
func TestReview134HangUpAfterHedgesAnswerCountsIt(t *testing.T) {
	for _, withRetry := range []bool{false, true} {
		name := "noRetry"
		if withRetry {
			name = "retry"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep", breaker.ConsecutiveFailures(1))
				opts := []Option{WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))}
				if withRetry {
					opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
				}
				p := New(opts...)
				var hedgeAnswered atomic.Bool
				op := func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedgeAnswered.Store(true)
						return 0, err134Unavailable
					}
					<-ctx.Done()
					return 0, ctx.Err()
				}
				ctx, cancel := context.WithCancel(t.Context())
				go func() {
					time.Sleep(50 * time.Millisecond) // the hedge answered at 10 ms
					cancel()
				}()
				_, err := Do(ctx, p, op)
				if !hedgeAnswered.Load() {
					t.Fatal("the hedge was not sent")
				}
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want the hang-up's", err)
				}
				if b.State() != resilience.StateOpen {
					t.Errorf("breaker %v after a call whose hedge got a 503 before the caller hung up: the answer was dropped (err %v)", b.State(), err)
				}
			})
		})
	}
}

// review134: as above, but the deadline ends the race, not a hang-up: the
// first attempt hangs to the deadline, the hedge's 503 came in time.
func TestReview134DeadlineAfterHedgesAnswerCountsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		p := New(WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		op := func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				return 0, err134Unavailable
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := Do(ctx, p, op)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the deadline's", err)
		}
		if b.State() != resilience.StateOpen {
			t.Errorf("breaker %v after a call whose hedge got a 503 before its deadline (err %v)", b.State(), err)
		}
	})
}

// review134: the first attempt ignores its context and returns the
// dependency's 503 with a long Retry-After after the caller hung up (late:
// no answer); a hedge got a 503 without a hint well before the hang-up (in
// time: the answer). The race keeps the longest hint, the late one's, and
// drops the only answer it had: the breaker counts nothing.
func TestReview134LateHintDropsInTimeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		p := New(WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		op := func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				return 0, err134Unavailable
			}
			time.Sleep(30 * time.Millisecond) // ignores the hang-up
			return 0, resilience.RetryAfter(err134Unavailable, 5*time.Second)
		}
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(20 * time.Millisecond)
			cancel()
		}()
		_, err := Do(ctx, p, op)
		if b.State() != resilience.StateOpen {
			t.Errorf("breaker %v: the hedge's in-time 503 was dropped for a late one's hint (err %v)", b.State(), err)
		}
	})
}

// review134: the first attempt's in-time 503 with a Retry-After hint, the
// hedge cut at the deadline: the caller's error keeps the hint, and the
// breaker counts the 503; the error matches DeadlineExceeded, not Canceled.
func TestReview134DeadlineKeepsHintAndClass(t *testing.T) {
	for _, withRetry := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("dep", breaker.ConsecutiveFailures(1))
			opts := []Option{WithBreaker(b), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))}
			if withRetry {
				opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
			}
			p := New(opts...)
			op := func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				time.Sleep(15 * time.Millisecond) // after the hedge was sent
				return 0, resilience.RetryAfter(err134Unavailable, 2*time.Second)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			_, err := Do(ctx, p, op)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Errorf("retry %v: err %v: want DeadlineExceeded only", withRetry, err)
			}
			if d, ok := resilience.RetryAfterHint(err); !ok || d != 2*time.Second {
				t.Errorf("retry %v: hint %v %v, want 2s (err %v)", withRetry, d, ok, err)
			}
			if c := resilience.Classify(err); c == resilience.ClassCanceled {
				t.Errorf("retry %v: class %v", withRetry, c)
			}
			if b.State() != resilience.StateOpen {
				t.Errorf("retry %v: breaker %v (err %v)", withRetry, b.State(), err)
			}
		})
	}
}

// review134: Discard is called exactly once for every result not
// returned, with several hedges (MaxExtra 3), as the caller hangs up or
// the deadline ends the race, and every attempt returns a result.
func TestReview134DiscardOnceWithHedgesCut(t *testing.T) {
	for _, how := range []string{"hangup", "deadline"} {
		synctest.Test(t, func(t *testing.T) {
			pol := hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))
			b := breaker.New("dep", breaker.ConsecutiveFailures(1000))
			p := New(WithBreaker(b), WithHedging(pol), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))))
			for range 10 { // budget for hedges
				if _, err := Do(t.Context(), p, func(context.Context) (*int, error) { return new(int), nil }); err != nil {
					t.Fatal(err)
				}
			}
			var made, discarded atomic.Int64
			seen := map[*int]int{}
			var mu = make(chan struct{}, 1)
			mu <- struct{}{}
			var n atomic.Int32
			op := func(ctx context.Context) (*int, error) {
				i := n.Add(1)
				r := new(int)
				made.Add(1)
				<-mu
				seen[r] = 0
				mu <- struct{}{}
				switch i {
				case 2: // the first hedge: a 503 in time
					return r, err134Unavailable
				case 3:
					time.Sleep(5 * time.Millisecond)
					return r, resilience.RetryAfter(err134Unavailable, time.Millisecond)
				}
				<-ctx.Done()
				return r, ctx.Err()
			}
			var ctx context.Context
			var cancel context.CancelFunc
			if how == "hangup" {
				ctx, cancel = context.WithCancel(t.Context())
				go func() { time.Sleep(45 * time.Millisecond); cancel() }()
			} else {
				ctx, cancel = context.WithTimeout(t.Context(), 45*time.Millisecond)
			}
			defer cancel()
			res, _ := Do(ctx, p, op, Discard(func(r *int) {
				discarded.Add(1)
				<-mu
				seen[r]++
				mu <- struct{}{}
			}))
			synctest.Wait()
			time.Sleep(time.Second)
			synctest.Wait()
			<-mu
			defer func() { mu <- struct{}{} }()
			for r, k := range seen {
				want := 1
				if r == res {
					want = 0
				}
				if k != want {
					t.Errorf("%s: a result discarded %d times, want %d (returned: %v)", how, k, want, r == res)
				}
			}
			if res != nil {
				if _, ok := seen[res]; !ok {
					t.Errorf("%s: returned a result no attempt made", how)
				}
			}
			t.Logf("%s: %d attempts, %d discarded", how, made.Load(), discarded.Load())
		})
	}
}
