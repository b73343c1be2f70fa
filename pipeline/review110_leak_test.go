package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/internal/sendtime"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review110Err struct{ code int }

func (e *review110Err) Error() string { return fmt.Sprintf("dep said %d", e.code) }

func review110NoLate(t *testing.T, what string, err error) {
	t.Helper()
	for e := err; e != nil; {
		if _, ok := e.(*sendtime.Success); ok {
			t.Errorf("%s: a *sendtime.Success reached the caller: %T %v", what, err, err)
			return
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
}

// Calls that the pipeline wraps for its breaker (queued at the limit,
// retried) return exactly what a plain client would, through every mode
// of the breaker, through a nested pipeline, and to an outer breaker.
func TestReview110NoLateLeaks(t *testing.T) {
	modes := []breaker.Mode{breaker.Normal, breaker.ForcedClosed, breaker.Disabled}
	for _, mode := range modes {
		for _, openFirst := range []bool{false, true} {
			for _, shape := range []string{"queued-ok", "queued-fail", "retried-ok", "retried-fail", "nested-queued-fail", "nested-retried-ok"} {
				name := fmt.Sprintf("%v/open=%v/%s", mode, openFirst, shape)
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						review110LeakCase(t, mode, openFirst, shape)
					})
				})
			}
		}
	}
}

func review110LeakCase(t *testing.T, mode breaker.Mode, openFirst bool, shape string) {
	ctx := context.Background()
	b := breaker.New("inner", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	if openFirst {
		_ = b.Execute(ctx, func(context.Context) error { return errors.New("boom") })
		if b.State() != resilience.StateOpen {
			t.Fatal("not open")
		}
		if mode == breaker.Normal {
			return // rejects
		}
	}
	if err := b.SetMode(ctx, mode, "review110"); err != nil && mode != breaker.Normal {
		t.Fatal(err)
	}
	lim := limit.NewFixed(1, limit.MaxWaiting(10))
	inner := pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(lim),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))))
	typed := &review110Err{503}
	n := 0
	op := func(ctx context.Context) (int, error) {
		n++
		switch shape {
		case "queued-ok", "nested-queued-ok":
			return 7, nil
		case "queued-fail", "nested-queued-fail":
			return 0, resilience.Terminal(typed)
		case "retried-ok", "nested-retried-ok":
			if n == 1 {
				return 0, typed
			}
			return 7, nil
		case "retried-fail":
			return 0, typed
		}
		return 0, nil
	}
	queue := strings.Contains(shape, "queued")
	hold := make(chan struct{})
	if queue {
		go func() {
			_, _ = pipeline.Do(ctx, pipeline.New(pipeline.WithLimit(lim)), func(context.Context) (int, error) { <-hold; return 0, nil })
		}()
		synctest.Wait()
		go func() { time.Sleep(50 * time.Millisecond); close(hold) }()
	}
	var res int
	var err error
	if strings.HasPrefix(shape, "nested") {
		outerB := breaker.New("outer", breaker.ConsecutiveFailures(1))
		outer := pipeline.New(pipeline.WithBreaker(outerB), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		res, err = pipeline.Do(ctx, outer, func(ctx context.Context) (int, error) {
			r, err := pipeline.Do(ctx, inner, op)
			review110NoLate(t, "inner", err)
			return r, err
		})
	} else {
		res, err = pipeline.Do(ctx, inner, op)
	}
	review110NoLate(t, "outer", err)
	switch {
	case strings.HasSuffix(shape, "-ok"):
		if err != nil || res != 7 {
			t.Fatalf("want 7, nil; got %d, %v (%T)", res, err, err)
		}
	default:
		if err == nil {
			t.Fatal("want an error")
		}
		var got *review110Err
		if !errors.As(err, &got) || got != typed {
			t.Errorf("errors.As lost the dependency's error: %T %v", err, err)
		}
		if !strings.Contains(err.Error(), "dep said 503") {
			t.Errorf("message: %q", err.Error())
		}
		if c := resilience.Classify(err); c == resilience.ClassRejected || c == resilience.ClassCanceled {
			t.Errorf("class %v for the dependency's failure", c)
		}
	}
	if queue {
		synctest.Wait()
	}
}
