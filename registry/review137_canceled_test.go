package registry_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// opCanceled is the operation's own cancellation (an inner context of its
// own, say): class canceled, the caller's context alive.
var r137OpCanceled = fmt.Errorf("inner stream: %w", context.Canceled)

var r137Transient = errors.New("503")

func r137RetryCanceled(opts ...retrypolicy.Option) pipeline.Option {
	base := []retrypolicy.Option{
		retrypolicy.BaseDelay(time.Millisecond), retrypolicy.Jitter(retrypolicy.None),
		retrypolicy.RetryIf(func(err error) bool {
			return errors.Is(err, context.Canceled) || resilience.Classify(err).Retryable()
		}),
	}
	return pipeline.WithRetry(retrypolicy.New(append(base, opts...)...))
}

func r137Seq(errs ...error) resilience.Operation[int] {
	i := 0
	return func(ctx context.Context) (int, error) {
		if i < len(errs) {
			i++
			return 0, errs[i-1]
		}
		return 1, nil
	}
}

// The registry's Failures (first-attempt failures less later successes)
// must agree with the breaker's TotalFailures where registry.go documents
// no difference. A canceled attempt that RetryIf would retry is now
// counted a failed attempt even when no retry follows it (MaxAttempts
// reached, out of time, quota): the call ends with class canceled, which
// the breaker leaves out.
func TestReview137CanceledRetriedThenGivenUp(t *testing.T) {
	cases := []struct {
		name    string
		opts    []retrypolicy.Option
		op      func() resilience.Operation[int]
		differs bool // documented (registry.go): a call of only the operation's own cancellations, retried, is a failure here
	}{
		{"MaxAttempts(1)", []retrypolicy.Option{retrypolicy.MaxAttempts(1)},
			func() resilience.Operation[int] { return r137Seq(r137OpCanceled) }, false},
		{"MaxAttempts(2), canceled twice", []retrypolicy.Option{retrypolicy.MaxAttempts(2)},
			func() resilience.Operation[int] { return r137Seq(r137OpCanceled, r137OpCanceled) }, true},
		{"MaxAttempts(2), 503 then canceled", []retrypolicy.Option{retrypolicy.MaxAttempts(2)},
			func() resilience.Operation[int] { return r137Seq(r137Transient, r137OpCanceled) }, false},
		{"out of time", []retrypolicy.Option{retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Hour), retrypolicy.MaxDelay(time.Hour)},
			func() resilience.Operation[int] { return r137Seq(r137OpCanceled) }, false},
		{"quota spent", []retrypolicy.Option{retrypolicy.MaxAttempts(3), retrypolicy.WithQuota(r137SpentQuota())},
			func() resilience.Operation[int] { return r137Seq(r137OpCanceled) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("r137-"+tc.name, breaker.ConsecutiveFailures(1000)) // counts not reset by opening
				reg := registry.New()
				p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Minute), r137RetryCanceled(tc.opts...)))
				if err != nil {
					t.Fatal(err)
				}
				const calls = 5
				for range calls {
					_, err := pipeline.Do(t.Context(), p, tc.op())
					if err == nil {
						t.Fatal("call succeeded")
					}
				}
				s := reg.Snapshot()
				runtime.KeepAlive(p) // the registry holds it weakly
				ps := s.Pipelines[0]
				bc := b.Snapshot().Counts
				t.Logf("registry: calls %d attempts %d S %d F %d; breaker: S %d F %d excl %d",
					ps.Calls, ps.Attempts, ps.Successes, ps.Failures, bc.TotalSuccesses, bc.TotalFailures, bc.TotalExclusions)
				if tc.differs {
					if ps.Failures != calls || bc.TotalFailures != 0 || bc.TotalExclusions != calls {
						t.Errorf("want registry F=%d, breaker F=0 and %d left out, as documented", calls, calls)
					}
				} else if uint64(bc.TotalFailures) != ps.Failures {
					t.Errorf("registry Failures %d, breaker TotalFailures %d: they must agree", ps.Failures, bc.TotalFailures)
				}
			})
		})
	}
}

// r137SpentQuota returns a quota that allows no retry.
func r137SpentQuota() *retrypolicy.Quota {
	return retrypolicy.NewQuota(0, 0, 0)
}

// The guard (the breaker, opened meanwhile) stops the retry of a canceled
// attempt that RetryIf retries; and, with WaitWhenOpen, the call resumes
// and its retry is canceled again with MaxAttempts reached.
func TestReview137CanceledRetryGuarded(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New(fmt.Sprint("r137-guard-", wait))
				reg := registry.New()
				opened := false
				sleep := func(ctx context.Context, d time.Duration) error {
					if !opened {
						opened = true
						if err := b.SetMode(ctx, breaker.ForcedOpen, "test"); err != nil {
							t.Error(err)
						}
						time.AfterFunc(time.Second, func() { b.SetMode(context.Background(), breaker.Normal, "test") })
					}
					return nil
				}
				popts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Minute),
					r137RetryCanceled(retrypolicy.MaxAttempts(2), retrypolicy.WithSleep(sleep))}
				if wait {
					popts = append(popts, pipeline.WaitWhenOpen())
				}
				p, err := reg.AddPipeline(pipeline.New(popts...))
				if err != nil {
					t.Fatal(err)
				}
				_, err = pipeline.Do(t.Context(), p, r137Seq(r137OpCanceled, r137OpCanceled))
				t.Logf("err: %v (class %v)", err, resilience.Classify(err))
				ps := reg.Snapshot().Pipelines[0]
				runtime.KeepAlive(p) // the registry holds it weakly
				bc := b.Snapshot().Counts
				t.Logf("registry: calls %d attempts %d S %d F %d rej %d; breaker: S %d F %d excl %d",
					ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Rejected, bc.TotalSuccesses, bc.TotalFailures, bc.TotalExclusions)
				if uint64(bc.TotalFailures) != ps.Failures {
					t.Errorf("registry Failures %d, breaker TotalFailures %d: they must agree", ps.Failures, bc.TotalFailures)
				}
			})
		})
	}
}

// A RetryIf that panics: the attempt was sent and answered (a 503), the
// dependency saw it; the registry counts each attempt sent as it ends.
func TestReview137RetryIfPanicUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r137-panic")
		reg := registry.New()
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.RetryIf(func(error) bool { panic("caller's bug") })))))
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		func() {
			defer func() { recover() }()
			pipeline.Do(t.Context(), p, func(context.Context) (int, error) { ran++; return 0, r137Transient })
		}()
		ps := reg.Snapshot().Pipelines[0]
		runtime.KeepAlive(p) // the registry holds it weakly
		t.Logf("ran %d; registry calls %d attempts %d S %d F %d", ran, ps.Calls, ps.Attempts, ps.Successes, ps.Failures)
		if ps.Attempts != uint64(ran) {
			t.Errorf("the operation ran %d times, the registry counts %d attempts", ran, ps.Attempts)
		}
	})
}
