package registry_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errBoom = errors.New("503")

type r136Case struct {
	name      string
	bopts     []breaker.Option
	popts     []pipeline.Option
	run       func(t *testing.T, p *pipeline.Pipeline)
	wantS     uint64 // the registry's Successes
	wantF     uint64 // the registry's Failures
	brS, brF  uint32 // the breaker's TotalSuccesses, TotalFailures
	differsOK bool   // a documented difference between the two
}

func retryWithDelay(n int, d time.Duration) pipeline.Option {
	return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(d),
		retrypolicy.Jitter(retrypolicy.None)))
}

func r136Retry(n int) pipeline.Option {
	return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(10*time.Millisecond),
		retrypolicy.Jitter(retrypolicy.None)))
}

// failThen returns an op that fails with errs[i] on its i-th run, and
// then succeeds.
func failThen(errs ...error) resilience.Operation[int] {
	i := 0
	return func(ctx context.Context) (int, error) {
		if i < len(errs) {
			i++
			return 0, errs[i-1]
		}
		return 1, nil
	}
}

func r136Cases() []r136Case {
	return []r136Case{
		{name: "plain failure", popts: []pipeline.Option{r136Retry(1)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom))
			}, wantF: 1, brF: 1},
		{name: "retries exhausted", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom, errBoom, errBoom))
			}, wantF: 1, brF: 1},
		{name: "retried success", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom, errBoom))
			}, wantS: 1, brS: 1},
		{name: "hang-up in backoff", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(5*time.Millisecond, cancel)
				pipeline.Do(ctx, p, failThen(errBoom, errBoom))
			}, wantF: 1, brF: 1},
		{name: "hang-up in retry", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						return 0, errBoom
					}
					cancel()
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}, wantF: 1, brF: 1},
		{name: "hang-up in first attempt", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					cancel()
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}},
		{name: "deadline in retry", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						return 0, errBoom
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}, wantF: 1, brF: 1},
		{name: "deadline in a long first attempt", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}, wantF: 1, brF: 1},
		{name: "deadline in a short first attempt (breaker: cut short)", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}, wantF: 1, differsOK: true},
		{name: "deadline in backoff", popts: []pipeline.Option{retryWithDelay(3, 400*time.Millisecond)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				pipeline.Do(ctx, p, failThen(errBoom, errBoom))
			}, wantF: 1, brF: 1},
		{name: "pending then success", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(resilience.Pending(errors.New("409"))))
			}, wantS: 1, brS: 1},
		{name: "pending to the end (documented: a failure here, none for the breaker)", popts: []pipeline.Option{r136Retry(2)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(resilience.Pending(errors.New("409")), resilience.Pending(errors.New("409"))))
			}, wantF: 1, differsOK: true},
		{name: "failure then pending to the end (documented)", popts: []pipeline.Option{r136Retry(2)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom, resilience.Pending(errors.New("409"))))
			}, wantF: 1, differsOK: true},
		{name: "pending then hang-up (documented)", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(5*time.Millisecond, cancel)
				pipeline.Do(ctx, p, failThen(resilience.Pending(errors.New("409")), errBoom))
			}, wantF: 1, differsOK: true},
		{name: "IgnoreIf", bopts: []breaker.Option{breaker.IgnoreIf(func(err error) bool { return errors.Is(err, errBoom) })},
			popts: []pipeline.Option{r136Retry(1)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom))
			}, wantF: 1, differsOK: true},
		{name: "FailIf says no", bopts: []breaker.Option{breaker.FailIf(func(err error) bool { return false })},
			popts: []pipeline.Option{r136Retry(1)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(errBoom))
			}, wantF: 1, brS: 1, differsOK: true},
		{name: "FailIf says yes to a permanent error", bopts: []breaker.Option{breaker.FailIf(func(err error) bool { return true })},
			popts: []pipeline.Option{r136Retry(1)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(resilience.Permanent(errors.New("400"))))
			}, wantF: 1, brF: 1},
		{name: "permanent error (400)", popts: []pipeline.Option{r136Retry(3)},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				pipeline.Do(t.Context(), p, failThen(resilience.Permanent(errors.New("400"))))
			}, wantF: 1, brS: 1, differsOK: true},
		{name: "limit refuses the first attempt", popts: []pipeline.Option{r136Retry(3), pipeline.WithLimit(limit.NewFixed(1))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				hold := make(chan struct{})
				go pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { <-hold; return 1, nil })
				synctest.Wait()
				pipeline.Do(t.Context(), p, failThen(errBoom))
				close(hold)
				synctest.Wait()
			}, wantS: 1, brS: 1},
		{name: "limit refuses the retry", popts: []pipeline.Option{r136Retry(3), pipeline.WithLimit(limit.NewFixed(1))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				hold := make(chan struct{})
				time.AfterFunc(time.Millisecond, func() {
					go pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { <-hold; return 1, nil })
				})
				pipeline.Do(t.Context(), p, failThen(errBoom))
				close(hold)
				synctest.Wait()
			}, wantS: 1, wantF: 1, brS: 1, brF: 1},
		{name: "hedge succeeds", popts: []pipeline.Option{r136Retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				var n atomic.Int32
				pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 1, nil
				})
			}, wantS: 1, brS: 1},
		{name: "hedge fails, first attempt succeeds", popts: []pipeline.Option{r136Retry(1), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				var n atomic.Int32
				pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						time.Sleep(50 * time.Millisecond)
						return 1, nil
					}
					return 0, errBoom
				})
			}, wantS: 1, brS: 1},
		{name: "hedge fails, then the caller hangs up", popts: []pipeline.Option{r136Retry(1), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(30*time.Millisecond, cancel)
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 0, errBoom
				})
			}, wantF: 1, brF: 1},
		{name: "hedge fails, then the caller hangs up, with retries left", popts: []pipeline.Option{r136Retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(30*time.Millisecond, cancel)
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 0, errBoom
				})
			}, wantF: 1, brF: 1},
		{name: "hedge fails, then the deadline", popts: []pipeline.Option{r136Retry(1), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 0, errBoom
				})
			}, wantF: 1, brF: 1},
		{name: "hedge pending, then the caller hangs up", popts: []pipeline.Option{r136Retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(30*time.Millisecond, cancel)
				var n atomic.Int32
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 0, resilience.Pending(errors.New("409"))
				})
			}, wantF: 1, differsOK: true},
		{name: "no hedge answered, caller hangs up", popts: []pipeline.Option{r136Retry(1), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)))},
			run: func(t *testing.T, p *pipeline.Pipeline) {
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(30*time.Millisecond, cancel)
				pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}},
	}
}

// TestReview136RegistryAgreesWithBreaker runs each documented case through
// a registered pipeline and compares the registry's Successes and
// Failures with the breaker's own counts.
func TestReview136RegistryAgreesWithBreaker(t *testing.T) {
	for _, c := range r136Cases() {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bopts := append([]breaker.Option{breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6)}, c.bopts...)
				b := breaker.New("dep", bopts...)
				reg := registry.New()
				p, err := reg.AddPipeline(pipeline.New(append([]pipeline.Option{pipeline.WithBreaker(b), pipeline.WithName("p")}, c.popts...)...))
				if err != nil {
					t.Fatal(err)
				}
				c.run(t, p)
				synctest.Wait()
				ps := reg.Snapshot().Pipelines[0]
				runtime.KeepAlive(p) // the registry holds it weakly
				bc := b.Counts()
				got := fmt.Sprintf("registry S=%d F=%d (calls %d attempts %d retries %d limited %d); breaker S=%d F=%d X=%d",
					ps.Successes, ps.Failures, ps.Calls, ps.Attempts, ps.Retries, ps.Limited, bc.TotalSuccesses, bc.TotalFailures, bc.TotalExclusions)
				t.Log(got)
				if ps.Successes != c.wantS || ps.Failures != c.wantF {
					t.Errorf("registry: want S=%d F=%d: %s", c.wantS, c.wantF, got)
				}
				if bc.TotalSuccesses != c.brS || bc.TotalFailures != c.brF {
					t.Errorf("breaker: want S=%d F=%d: %s", c.brS, c.brF, got)
				}
				if !c.differsOK && (uint64(bc.TotalSuccesses) != ps.Successes || uint64(bc.TotalFailures) != ps.Failures) {
					t.Errorf("registry and breaker disagree, undocumented: %s", got)
				}
				if ps.Failures+ps.Successes > ps.Calls {
					t.Errorf("more outcomes than calls: %s", got)
				}
			})
		})
	}
}

// TestReview136RetriedCancellationUnderflows: a retry policy told to retry
// everything (RetryIf) retries an attempt whose error is of class
// canceled though the caller's context is alive (an operation's own
// internal cancellation). Its retry's success is subtracted from the
// failures of other calls: f.Failed - l.OK assumes every retry follows
// a first attempt counted as failed.
func TestReview136RetriedCancellationUnderflows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1000), breaker.Window(time.Hour, 6))
		reg := registry.New()
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithName("p"),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond),
				retrypolicy.RetryIf(func(error) bool { return true })))))
		if err != nil {
			t.Fatal(err)
		}
		// Call A: a plain failure, every attempt.
		pipeline.Do(t.Context(), p, failThen(errBoom, errBoom, errBoom))
		// Call B: its first attempt ends with the operation's own
		// cancellation (the caller's context is alive), retried, succeeds.
		pipeline.Do(t.Context(), p, failThen(fmt.Errorf("stream reset: %w", context.Canceled)))
		// Call C: the same, but its retries fail.
		pipeline.Do(t.Context(), p, failThen(fmt.Errorf("stream reset: %w", context.Canceled), errBoom, errBoom))
		ps := reg.Snapshot().Pipelines[0]
		runtime.KeepAlive(p) // the registry holds it weakly
		bc := b.Counts()
		got := fmt.Sprintf("registry S=%d F=%d calls %d; breaker S=%d F=%d X=%d", ps.Successes, ps.Failures, ps.Calls,
			bc.TotalSuccesses, bc.TotalFailures, bc.TotalExclusions)
		t.Log(got)
		if ps.Successes != 1 || ps.Failures != 2 {
			t.Errorf("want registry S=1 F=2 (A and C failed, B succeeded): %s", got)
		}
		if uint64(bc.TotalFailures) != ps.Failures {
			t.Errorf("registry and breaker disagree: %s", got)
		}
	})
}
