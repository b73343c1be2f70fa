package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// review168: a healthy-but-slow dependency (every answer takes 2 s) with
// short-deadline callers (1 s) that its answers' times excuse (cutShort),
// long-deadline callers that get answers every 2 s, and, in one variant,
// a single long poll (90 s) among them. A call that lasts more than 80 s
// rebases the spans as it is answered (core.rebase), forgetting every
// answer timed: the short-deadline failures then count until the next
// answer is timed. The dependency never failed: the breaker must never
// open.
func review168SlowDependency(t *testing.T, longPoll time.Duration) (opened int64, rejected int64) {
	return review168SlowDependencyRun(t, longPoll, longPoll+20*time.Second)
}

func review168SlowDependencyRun(t *testing.T, longPoll, total time.Duration) (opened int64, rejected int64) {
	return review168SlowDependencyRunPoll(t, longPoll, total, false)
}

func review168SlowDependencyRunPoll(t *testing.T, longPoll, total time.Duration, pollTimesOut bool) (opened int64, rejected int64) {
	var open, rej atomic.Int64
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("slow")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		call := func(timeout, answerAfter time.Duration) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := b.Execute(ctx, func(ctx context.Context) error {
				select {
				case <-time.After(answerAfter):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyRequests) {
				rej.Add(1)
			}
		}
		// long-deadline callers: one every 2 s, answered after 2 s
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(2 * time.Second)
			defer tk.Stop()
			for {
				wg.Add(1)
				go call(5*time.Second, 2*time.Second)
				select {
				case <-tk.C:
				case <-stop:
					return
				}
			}
		}()
		// short-deadline callers: one every 100 ms, 1 s deadline, offset 7 ms
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(3*time.Second + 7*time.Millisecond) // after the first answers: a cold breaker excuses nothing
			tk := time.NewTicker(100 * time.Millisecond)
			defer tk.Stop()
			for {
				wg.Add(1)
				go call(time.Second, 2*time.Second)
				select {
				case <-tk.C:
				case <-stop:
					return
				}
			}
		}()
		if longPoll > 0 {
			wg.Add(1)
			go func() {
				time.Sleep(50 * time.Millisecond)
				if pollTimesOut {
					call(longPoll, 10*longPoll) // a long poll that its deadline ends
					return
				}
				call(longPoll+30*time.Second, longPoll) // a long poll, answered
			}()
		}
		// watch the state
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(10 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-tk.C:
					if b.State().String() != "closed" {
						open.Add(1)
					}
				case <-stop:
					return
				}
			}
		}()
		time.Sleep(total)
		close(stop)
		wg.Wait()
	})
	return open.Load(), rej.Load()
}

// Control: without the long poll the breaker stays closed.
func TestReview168SlowDependencyStaysClosed(t *testing.T) {
	opened, rejected := review168SlowDependencyRun(t, 0, 110*time.Second)
	if opened != 0 || rejected != 0 {
		t.Fatalf("breaker left closed %d ticks, %d calls rejected, on a healthy-but-slow dependency", opened, rejected)
	}
}

// The attack: one long poll of 90 s among them.
func TestReview168LongPollOpensBreakerOfSlowDependency(t *testing.T) {
	opened, rejected := review168SlowDependency(t, 90*time.Second)
	if opened != 0 || rejected != 0 {
		t.Fatalf("one 90 s call among short-deadline calls to a healthy-but-slow dependency opened the breaker: left closed %d ticks (of 10 ms), %d calls rejected", opened, rejected)
	}
}

// Same, with the long poll a mere 81 s.
func TestReview168LongPoll81sOpensBreakerOfSlowDependency(t *testing.T) {
	opened, rejected := review168SlowDependency(t, 81*time.Second)
	if opened != 0 || rejected != 0 {
		t.Fatalf("one 81 s call opened the breaker: left closed %d ticks (of 10 ms), %d calls rejected", opened, rejected)
	}
}

// A long poll that its own 90 s deadline ends (nothing to say): cutShort
// rebases too.
func TestReview168LongPollTimingOutOpensBreakerOfSlowDependency(t *testing.T) {
	opened, rejected := review168SlowDependencyRunPoll(t, 90*time.Second, 110*time.Second, true)
	if opened != 0 || rejected != 0 {
		t.Fatalf("one 90 s long poll ended by its deadline opened the breaker: left closed %d ticks (of 10 ms), %d calls rejected", opened, rejected)
	}
}
