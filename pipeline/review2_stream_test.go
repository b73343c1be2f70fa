package pipeline_test

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
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

type r2trace struct{}

type r2callTrace struct{}

func (r2trace) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return context.WithValue(ctx, r2key{}, "call"), r2callTrace{}
}
func (r2callTrace) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	return context.WithValue(ctx, r2key{}, "attempt"), func(error) {}
}
func (r2callTrace) End(error) {}

type r2key struct{}

// Every context a streamed call hands its operation stays alive until
// release, and is done after it (or is the caller's own, for a pipeline
// that makes none), in many configurations; on error too.
func TestReview2DoStreamContexts(t *testing.T) {
	type cfg struct {
		name string
		opts func() []pipeline.Option
	}
	var cfgs []cfg
	for mask := range 1 << 8 {
		cfgs = append(cfgs, cfg{fmt.Sprintf("mask%08b", mask), func() []pipeline.Option {
			var o []pipeline.Option
			if mask&1 != 0 {
				o = append(o, pipeline.WithBreaker(breaker.New(fmt.Sprint("b", mask))))
			}
			if mask&2 != 0 {
				o = append(o, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))))
			}
			if mask&4 != 0 {
				o = append(o, pipeline.WithTracer(r2trace{}))
			}
			if mask&8 != 0 {
				o = append(o, pipeline.WaitWhenOpen())
			}
			if mask&16 != 0 {
				o = append(o, pipeline.WithLimit(limit.NewFixed(4)), pipeline.WithThrottle(throttle.New()))
			}
			if mask&32 != 0 {
				o = append(o, pipeline.WithTimeBudget(time.Minute))
			}
			if mask&64 != 0 {
				o = append(o, pipeline.WithAttemptTimeout(time.Minute))
			}
			if mask&128 != 0 {
				o = append(o, pipeline.WithHedging(hedge.New(hedge.Delay(time.Minute))))
			}
			return o
		}})
	}
	for _, c := range cfgs {
		for _, fail := range []bool{false, true} {
			p := pipeline.New(c.opts()...)
			caller := context.Background()
			var last context.Context
			_, release, err := pipeline.DoStream(caller, p, func(ctx context.Context) (int, error) {
				last = ctx
				if fail {
					return 0, resilience.Permanent(errors.New("no"))
				}
				return 1, nil
			})
			if (err != nil) != fail {
				t.Fatalf("%s: err %v", c.name, err)
			}
			if last.Err() != nil {
				t.Errorf("%s fail=%v: the operation's context is done before release: %v", c.name, fail, last.Err())
			}
			release()
			release()
			_, own := last.Deadline()
			if own && last.Err() == nil {
				t.Errorf("%s fail=%v: a context with a deadline of the call's own is alive after release", c.name, fail)
			}
		}
	}
}
