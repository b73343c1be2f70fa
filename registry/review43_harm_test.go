package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// An error whose own methods fault: a typed nil pointer, as a plain
// client returns it, and one whose Is panics.
type review43NilErr struct{ code int }

func (e *review43NilErr) Error() string { return "nil err" }
func (e *review43NilErr) ResilienceClass() resilience.Class {
	_ = e.code
	return resilience.ClassTransient
}

// The common shape: a wrapping error type with a pointer receiver,
// returned as a typed nil.
type review43WrapErr struct{ err error }

func (e *review43WrapErr) Error() string { return "wrap" }
func (e *review43WrapErr) Unwrap() error { return e.err }

type review43BadIs struct{}

func (review43BadIs) Error() string { return "bad is" }
func (review43BadIs) Is(error) bool { panic("Is") }
func (review43BadIs) Unwrap() error { return nil }

// The registry must not change the outcome of a call: the same operation
// through the same stages, registered or not, ends alike.
func TestReview43RegistryChangesNoOutcome(t *testing.T) {
	ops := map[string]func(context.Context) (int, error){
		"typed nil error":       func(context.Context) (int, error) { var e *review43NilErr; return 0, e },
		"typed nil wrapper":     func(context.Context) (int, error) { var e *review43WrapErr; return 0, e },
		"error whose Is panics": func(context.Context) (int, error) { return 0, review43BadIs{} },
		"panic":                 func(context.Context) (int, error) { panic("op") },
	}
	stages := map[string]func() []pipeline.Option{
		"name only": func() []pipeline.Option { return []pipeline.Option{pipeline.WithName("n")} },
		"attempt timeout": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithName("n"), pipeline.WithAttemptTimeout(time.Second)}
		},
		"limit": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithName("n"), pipeline.WithLimit(limit.NewFixed(4))}
		},
		"throttle": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithName("n"), pipeline.WithThrottle(throttle.New())}
		},
		"hedge": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithName("n"), pipeline.WithHedging(hedge.New(hedge.Delay(time.Second)))}
		},
		"breaker": func() []pipeline.Option { return []pipeline.Option{pipeline.WithBreaker(breaker.New("n"))} },
		"retry": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithName("n"), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1)))}
		},
	}
	outcome := func(p *pipeline.Pipeline, op func(context.Context) (int, error)) (res string) {
		defer func() {
			if r := recover(); r != nil {
				res = fmt.Sprint("panic: ", r)
			}
		}()
		_, err := pipeline.Do(context.Background(), p, op)
		if err == nil {
			return "ok"
		}
		return "error"
	}
	for sn, opts := range stages {
		for on, op := range ops {
			plain := outcome(pipeline.New(opts()...), op)
			p, err := registry.New().AddPipeline(pipeline.New(opts()...))
			if err != nil {
				t.Fatal(err)
			}
			reg := outcome(p, op)
			t.Logf("%-16s %-22s plain: %-12s registered: %s", sn, on, plain, reg)
			if plain != reg {
				t.Errorf("%s, %s: %s unregistered, %s registered", sn, on, plain, reg)
			}
		}
	}
	_ = errors.New
}
