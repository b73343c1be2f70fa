package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

type review73PanicErr struct{ where string }

func (e review73PanicErr) Error() string {
	if e.where == "Error" {
		panic("Error")
	}
	return "bad"
}
func (e review73PanicErr) Unwrap() error {
	if e.where == "Unwrap" {
		panic("Unwrap")
	}
	return nil
}
func (e review73PanicErr) Is(error) bool {
	if e.where == "Is" {
		panic("Is")
	}
	return false
}
func (e review73PanicErr) ResilienceClass() resilience.Class {
	if e.where == "Class" {
		panic("Class")
	}
	return resilience.ClassTransient
}

// An error whose methods panic: no slot lost, nothing learned, limit
// never exceeded.
func TestReview73PanickingErrors(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(4), limit.Max(4), limit.MaxWaiting(100))
	th := throttle.New()
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))),
		pipeline.WithThrottle(th),
		pipeline.WithLimit(l),
	)
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			where := "Class"
			_ = i
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				time.Sleep(2 * time.Millisecond)
				return 0, review73PanicErr{where}
			})
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	if f, w := l.InFlight(), l.Waiting(); f != 0 || w != 0 {
		t.Errorf("InFlight %d Waiting %d after all calls", f, w)
	}
	if l.Limit() < 4 || th.RejectProbability() > 0 {
		t.Errorf("learned from errors whose class panics: limit %d throttle p %.2f", l.Limit(), th.RejectProbability())
	}
}
