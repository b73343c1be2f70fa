package benchmarks

import (
	"context"
	"errors"
	"testing"
	"time"

	retrygo "github.com/avast/retry-go/v4"
	"github.com/cenkalti/backoff/v4"
	"github.com/failsafe-go/failsafe-go"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// retries is how many retries the failing path makes per call: five
// attempts, the per-retry cost is ns/op divided by this.
const retries = 4

var errFail = errors.New("fail")

//go:noinline
func ok() (int, error) { return 1, nil }

//go:noinline
func fail() (int, error) { return 0, errFail }

// A subject is one library's way to make a call: set up once, then called
// per operation; parallel benchmarks set up one per goroutine where the
// library's object is not safe for concurrent use.
type subject struct {
	name     string
	happy    func() func() error
	failing  func() func() error // nil: no retries to measure
	perGorou bool
}

// noTimer makes backoff/v4 and retry-go wait no time, like WithSleep below.
type noTimer struct{ c chan time.Time }

func newNoTimer() *noTimer { c := make(chan time.Time); close(c); return &noTimer{c: c} }

func (t *noTimer) Start(time.Duration)                  {}
func (t *noTimer) Stop()                                {}
func (t *noTimer) C() <-chan time.Time                  { return t.c }
func (t *noTimer) After(time.Duration) <-chan time.Time { return t.c }

func noSleep(context.Context, time.Duration) error { return nil }

var subjects = []subject{
	{
		name:  "BareCall",
		happy: func() func() error { return func() error { _, err := ok(); return err } },
	},
	{
		name: "Gobreaker",
		happy: func() func() error {
			cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench"})
			return func() error { _, err := cb.Execute(ok); return err }
		},
	},
	{
		name:  "Clock",
		happy: func() func() error { return func() error { clock = time.Now(); return nil } },
	},
	{
		name: "GobreakerWindow",
		happy: func() func() error {
			cb := gobreaker.NewCircuitBreaker[int](windowed("bench"))
			return func() error { _, err := cb.Execute(ok); return err }
		},
	},
	{
		name: "Backoff",
		happy: func() func() error {
			b := backoff.WithMaxRetries(backoff.NewExponentialBackOff(), retries)
			return func() error { _, err := backoff.RetryWithData(ok, b); return err }
		},
		failing: func() func() error {
			b := backoff.WithMaxRetries(backoff.NewExponentialBackOff(), retries)
			t := newNoTimer()
			return func() error { _, err := backoff.RetryNotifyWithTimerAndData(fail, b, nil, t); return err }
		},
		perGorou: true,
	},
	{
		name: "RetryGo",
		happy: func() func() error {
			return func() error { _, err := retrygo.DoWithData(ok, retrygo.Attempts(retries+1)); return err }
		},
		failing: func() func() error {
			t := newNoTimer()
			return func() error {
				_, err := retrygo.DoWithData(fail, retrygo.Attempts(retries+1), retrygo.WithTimer(t), retrygo.LastErrorOnly(true))
				return err
			}
		},
	},
	{
		name: "FailsafeRetryBreaker",
		happy: func() func() error {
			ex := failsafe.With[int](fsretry.NewBuilder[int]().WithMaxAttempts(retries+1).Build(), fscb.NewWithDefaults[int]())
			return func() error { _, err := ex.Get(ok); return err }
		},
		failing: func() func() error {
			cb := fscb.NewBuilder[int]().WithFailureThreshold(1 << 30).Build()
			ex := failsafe.With[int](fsretry.NewBuilder[int]().WithMaxAttempts(retries+1).ReturnLastFailure().Build(), cb)
			return func() error { _, err := ex.Get(fail); return err }
		},
	},
	{
		// resiliencekit's breaker alone, with its default window.
		name: "Breaker",
		happy: func() func() error {
			b := breaker.New("bench")
			ctx := context.Background()
			op := func(context.Context) error { _, err := ok(); return err }
			return func() error { return b.Execute(ctx, op) }
		},
	},
	{
		name: "Pipeline",
		happy: func() func() error {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(retries+1))))
			ctx := context.Background()
			op := func(context.Context) (int, error) { return ok() }
			return func() error { _, err := pipeline.Do(ctx, p, op); return err }
		},
		failing: func() func() error {
			p := pipeline.New(
				pipeline.WithBreaker(breaker.New("bench", breaker.ConsecutiveFailures(0))),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(retries+1), retrypolicy.WithSleep(noSleep))))
			ctx := context.Background()
			op := func(context.Context) (int, error) { return fail() }
			return func() error { _, err := pipeline.Do(ctx, p, op); return err }
		},
	},
	{
		name: "FailsafeRetryBreakerTimeout",
		happy: func() func() error {
			ex := failsafe.With[int](fsretry.NewBuilder[int]().WithMaxAttempts(3).Build(), fscb.NewWithDefaults[int](),
				fstimeout.New[int](500*time.Millisecond))
			return func() error { _, err := ex.Get(ok); return err }
		},
	},
	{
		name: "PipelineQuickStart",
		happy: func() func() error {
			p := quickStart(breaker.New("bench"))
			ctx := context.Background()
			op := func(context.Context) (int, error) { return ok() }
			return func() error { _, err := pipeline.Do(ctx, p, op); return err }
		},
	},
	{
		name:  "PipelineQuota",
		happy: pipelineHappy(),
	},
	{
		name:  "PipelineQuotaListener",
		happy: pipelineHappy(pipeline.WithListener(noCallDone{})),
	},
	{
		name:  "PipelineQuotaListenerDurations",
		happy: pipelineHappy(pipeline.WithListener(resilience.ListenerFunc(func(resilience.Event) {}))),
	},
}

// clock keeps the Clock subject's reading.
var clock time.Time

// windowed is a gobreaker with the window of breaker.New's default: 60 s
// in 6 buckets, five failures in a row, and outcomes it does not count.
func windowed(name string) gobreaker.Settings {
	return gobreaker.Settings{
		Name: name, Interval: time.Minute, BucketPeriod: 10 * time.Second,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return err == errFail },
	}
}

// quickStart is the README's quick start (a time budget, a breaker, three
// attempts) with an attempt timeout too, which the README adds only where
// an attempt can hang: the costlier of the two.
func quickStart(b *breaker.Breaker) *pipeline.Pipeline {
	return pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithAttemptTimeout(500*time.Millisecond),
	)
}

// pipelineHappy is a Pipeline with breaker, retry and a retry quota, and
// opts.
func pipelineHappy(opts ...pipeline.Option) func() func() error {
	return func() func() error {
		p := pipeline.New(append(opts, pipeline.WithBreaker(breaker.New("bench")),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(retries+1),
				retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, 10*time.Second)))))...)
		ctx := context.Background()
		op := func(context.Context) (int, error) { return ok() }
		return func() error { _, err := pipeline.Do(ctx, p, op); return err }
	}
}

// noCallDone is a listener that takes every event but the end of a call,
// whose duration costs two clock reads per call.
type noCallDone struct{}

func (noCallDone) OnEvent(resilience.Event)          {}
func (noCallDone) Wants(k resilience.EventKind) bool { return k != resilience.EventCallDone }

func BenchmarkHappy(b *testing.B) {
	for _, s := range subjects {
		b.Run(s.name, func(b *testing.B) {
			call := s.happy()
			b.ReportAllocs()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkHappyParallel(b *testing.B) {
	for _, s := range subjects {
		b.Run(s.name, func(b *testing.B) {
			shared := s.happy()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				call := shared
				if s.perGorou {
					call = s.happy()
				}
				for pb.Next() {
					if err := call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkFailing(b *testing.B) {
	for _, s := range subjects {
		if s.failing == nil {
			continue
		}
		b.Run(s.name, func(b *testing.B) {
			call := s.failing()
			b.ReportAllocs()
			for b.Loop() {
				if err := call(); !errors.Is(err, errFail) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/retries, "ns/retry")
		})
	}
}

// BenchmarkRejected is a call that an open breaker rejects: gobreaker's
// (the baseline), a pipeline's, and the quick start's, whose time budget
// must cost nothing on a call it rejects.
func BenchmarkRejected(b *testing.B) {
	open := func() *breaker.Breaker {
		br := breaker.New("bench", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		_ = br.Execute(context.Background(), func(context.Context) error { return errFail })
		return br
	}
	ctx := context.Background()
	op := func(context.Context) (int, error) { return ok() }
	for _, s := range []struct {
		name string
		call func() error
	}{
		{"Gobreaker", func() func() error {
			cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench", Timeout: time.Hour,
				ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 }})
			_, _ = cb.Execute(fail)
			return func() error { _, err := cb.Execute(ok); return err }
		}()},
		{"Pipeline", func() func() error {
			p := pipeline.New(pipeline.WithBreaker(open()), pipeline.WithRetry(retrypolicy.New()))
			return func() error { _, err := pipeline.Do(ctx, p, op); return err }
		}()},
		{"PipelineQuickStart", func() func() error {
			p := quickStart(open())
			return func() error { _, err := pipeline.Do(ctx, p, op); return err }
		}()},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.call(); err == nil {
					b.Fatal("not rejected")
				}
			}
		})
	}
}
