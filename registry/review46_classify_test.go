package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

type review46PanicClass struct{ how string }

func (e review46PanicClass) Error() string { return "panicky " + e.how }
func (e review46PanicClass) ResilienceClass() resilience.Class {
	if e.how == "class" {
		panic("ResilienceClass panics")
	}
	return resilience.ClassTransient
}

type review46PanicUnwrap struct{}

func (review46PanicUnwrap) Error() string { return "unwrap panics" }
func (review46PanicUnwrap) Unwrap() error { panic("Unwrap panics") }

type review46PanicIs struct{}

func (review46PanicIs) Error() string     { return "is panics" }
func (review46PanicIs) Is(error) bool     { panic("Is panics") }
func (review46PanicIs) Unwrap() error     { return nil }
func (review46PanicIs) Timeout() bool     { return false }
func (review46PanicIs) Temporary() bool   { return false }
func (review46PanicIs) String() string    { return "x" }
func (review46PanicIs) Format(string) int { return 0 }

// Registering a pipeline does not change a call's outcome, even for an
// error whose methods panic as it is classified: the call through the
// registered pipeline ends as through the pipeline itself.
func TestReview46_PanickingClassifyOutcomeUnchanged(t *testing.T) {
	errs := map[string]error{
		"class":  review46PanicClass{"class"},
		"unwrap": review46PanicUnwrap{},
		"is":     review46PanicIs{},
	}
	configs := map[string]func() []pipeline.Option{
		"bare": func() []pipeline.Option { return nil },
		"retry": func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2)))}
		},
		"breaker":  func() []pipeline.Option { return []pipeline.Option{pipeline.WithBreaker(breaker.New(""))} },
		"throttle": func() []pipeline.Option { return []pipeline.Option{pipeline.WithThrottle(throttle.New())} },
		"limit":    func() []pipeline.Option { return []pipeline.Option{pipeline.WithLimit(limit.NewFixed(4))} },
		"hedge":    func() []pipeline.Option { return []pipeline.Option{pipeline.WithHedging(hedge.New())} },
	}
	run := func(p *pipeline.Pipeline, e error) (res string) {
		defer func() {
			if v := recover(); v != nil {
				res = fmt.Sprint("panic: ", v)
			}
		}()
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, e }, pipeline.SingleAttempt())
		return fmt.Sprint("err: ", err)
	}
	i := 0
	for cn, cfg := range configs {
		for en, e := range errs {
			i++
			opts := append(cfg(), pipeline.WithName(fmt.Sprintf("p%d", i)))
			if cn == "breaker" {
				opts = append(cfg()[:0], pipeline.WithBreaker(breaker.New(fmt.Sprintf("b%d", i))), pipeline.WithName(fmt.Sprintf("p%d", i)))
			}
			plain := pipeline.New(opts...)
			reg := registry.New()
			registered, err := reg.AddPipeline(plain)
			if err != nil {
				t.Fatal(err)
			}
			a, b := run(plain, e), run(registered, e)
			if a != b {
				t.Errorf("%s/%s: plain %q, registered %q", cn, en, a, b)
			} else {
				t.Logf("%s/%s: both %q", cn, en, a)
			}
			_ = reg.Snapshot()
		}
	}
	_ = errors.New
}
