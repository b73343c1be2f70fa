package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r135Ctx has a deadline that no timer ends: passed by the clock, Err nil.
type r135Ctx struct {
	context.Context
	dl time.Time
}

func (c r135Ctx) Deadline() (time.Time, bool) { return c.dl, true }

type r135Events struct {
	mu    sync.Mutex
	kinds []resilience.EventKind
}

func (l *r135Events) OnEvent(e resilience.Event) {
	l.mu.Lock()
	l.kinds = append(l.kinds, e.Kind)
	l.mu.Unlock()
}

func (l *r135Events) has(k resilience.EventKind) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.kinds {
		if x == k {
			return true
		}
	}
	return false
}

// A pipeline's one attempt whose deadline passed by the clock while the
// operation ran: the class the caller sees and the breaker's count must be
// those of the operation's answer. Prints a table to compare with 9faf6ec.
func TestReview135OnceClass(t *testing.T) {
	errs := map[string]error{
		"transient": errors.New("503"),
		"permanent": resilience.Permanent(errors.New("404")),
		"pending":   resilience.Pending(errors.New("409 in progress")),
		"terminal":  resilience.Terminal(errors.New("terminal")),
		"canceled":  context.Canceled,
		"deadline":  context.DeadlineExceeded,
		"success":   nil,
	}
	for _, name := range []string{"transient", "permanent", "pending", "terminal", "canceled", "deadline", "success"} {
		for _, mode := range []string{"bare", "probe", "single"} {
			synctest.Test(t, func(t *testing.T) {
				want := errs[name]
				b := breaker.New("r135", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
				l := &r135Events{}
				opts := []Option{WithBreaker(b), WithListener(l)}
				var copts []CallOption
				if mode == "single" {
					opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
					copts = append(copts, SingleAttempt())
				}
				p := New(opts...)
				if mode == "probe" {
					Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("boom") })
					time.Sleep(2 * time.Second)
				}
				before := b.Counts()
				ctx := r135Ctx{context.Background(), time.Now().Add(10 * time.Millisecond)}
				_, err := Do(ctx, p, func(context.Context) (int, error) {
					time.Sleep(20 * time.Millisecond)
					return 1, want
				}, copts...)
				c := b.Counts()
				fmt.Printf("R135 %-9s %-6s class=%v isDL=%v budgetEv=%v fail=%d excl=%d succ=%d err=%v\n", name, mode,
					resilience.Classify(err), errors.Is(err, context.DeadlineExceeded), l.has(resilience.EventTimeBudgetExceeded), c.TotalFailures-before.TotalFailures, c.TotalExclusions-before.TotalExclusions, c.TotalSuccesses-before.TotalSuccesses, err)
				if resilience.Classify(err) != resilience.Classify(want) {
					t.Errorf("%s/%s: class %v, want %v (%v)", name, mode, resilience.Classify(err), resilience.Classify(want), err)
				}
				if want == nil && err != nil {
					t.Errorf("success reported as %v", err)
				}
			})
		}
	}
}
