package main

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// call is one call offered to a backend. Everything random about it (the
// fate of each of its requests, its retry delays) is drawn from sources
// seeded by the run's seed, the call's number and the attempt's, so that
// a run's figures do not depend on the order in which goroutines run:
// in virtual time, a run is the same every time.
type call struct {
	id, seed uint64
	b        *backend
	n        atomic.Uint64 // attempts sent
	// send, if set, sends attempt n to b some other way than in process.
	send func(ctx context.Context, c *call, n uint64) error
}

// Streams of random numbers of a call, per attempt.
const (
	streamBackend = iota + 1
	streamJitter
)

func (c *call) rand(stream, n uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.seed*0x9e3779b97f4a7c15^c.id, stream<<32|n))
}

// attempt sends one request and returns its number, from 1.
func (c *call) attempt(ctx context.Context) (uint64, error) {
	n := c.n.Add(1)
	if c.send != nil {
		return n, c.send(ctx, c, n)
	}
	return n, c.b.serve(ctx, c.rand(streamBackend, n))
}

// caller makes one call, within ctx, the caller's deadline.
type caller func(ctx context.Context, c *call) error

// strategy is one way to call a dependency. build makes its state (a
// breaker, a quota, a token bucket) afresh for a run of sc, shared by
// every call of that run. A strategy of the Pipeline has pipeline too:
// the options of its pipeline for sc, with its retry policy made by
// retry, so that a transport with an integration of its own (grpcclient's
// interceptor, over -grpc) can run the calls through that pipeline.
type strategy struct {
	name     string
	build    func(sc *scenario) caller
	pipeline func(sc *scenario, retry newRetry) []pipeline.Option
}

// newRetry makes a retry policy with opts: retrypolicy.New, or
// jitteredRetry.
type newRetry func(opts ...retrypolicy.Option) *retrypolicy.Policy

// pipelineStrategy is the strategy of the Pipeline with the options opts
// gives. In process, and over a transport that carries attempts, its
// retries wait the delays drawn from the call's seeded source
// (jitteredRetry, pipelineCaller).
func pipelineStrategy(name string, opts func(sc *scenario, retry newRetry) []pipeline.Option) strategy {
	return strategy{name: name, pipeline: opts, build: func(sc *scenario) caller {
		return pipelineCaller(pipeline.New(opts(sc, jitteredRetry)...))
	}}
}

// The strategies' names.
const (
	noRetryName     = "no retry"
	plainName       = "retry, full jitter"
	grpcName        = "grpc-go retry"
	grpcThrottled   = "grpc-go retry + throttling"
	failsafeName    = "failsafe-go retry + breaker"
	defaultsName    = "pipeline, defaults"
	recommendedName = "pipeline, recommended"
)

// plainRetries are the strategies of retries alone, whose best the goals
// compare the pipeline's backend requests with.
var plainRetries = []string{plainName, grpcName}

// strategies are the strategies every scenario runs, in the order the
// tables print them.
var strategies = []strategy{
	{name: noRetryName, build: func(*scenario) caller {
		return func(ctx context.Context, c *call) error { _, err := c.attempt(ctx); return err }
	}},
	pipelineStrategy(plainName, func(sc *scenario, retry newRetry) []pipeline.Option {
		return []pipeline.Option{pipeline.WithRetry(retry()), pipeline.WithAttemptTimeout(sc.attemptTimeout)}
	}),
	{name: grpcName, build: func(*scenario) caller { return grpcRetry(nil) }},
	{name: grpcThrottled, build: func(*scenario) caller {
		return grpcRetry(&grpcThrottler{max: grpcMaxTokens, thresh: grpcMaxTokens / 2, ratio: grpcTokenRatio, tokens: grpcMaxTokens})
	}},
	{name: failsafeName, build: failsafeCaller},
	pipelineStrategy(defaultsName, defaultsWith()),
	pipelineStrategy(recommendedName, recommended),
}

// defaultsWith is the Pipeline with a breaker and a retry policy of
// their defaults (4 attempts, where the README's quick start sets 3), and
// no attempt timeout, its breaker made with opts.
func defaultsWith(opts ...breaker.Option) func(sc *scenario, retry newRetry) []pipeline.Option {
	return func(sc *scenario, retry newRetry) []pipeline.Option {
		return []pipeline.Option{pipeline.WithBreaker(breaker.New("backend", opts...)), pipeline.WithRetry(retry())}
	}
}

// strategyKeys name the strategies on the command line (-strategies).
var strategyKeys = map[string]string{
	"none": noRetryName, "retry": plainName, "grpc": grpcName, "grpc-throttled": grpcThrottled,
	"failsafe": failsafeName, "defaults": defaultsName, "recommended": recommendedName,
	"defaults-open30s": openName, "defaults-timeout": timeoutName, "wait": waitName, "quota": quotaName,
}

// strategyByName returns the strategy called name, or false.
func strategyByName(name string) (strategy, bool) {
	for _, s := range slices.Concat(strategies, extraStrategies, []strategy{waitStrategy}) {
		if s.name == name {
			return s, true
		}
	}
	return strategy{}, false
}

// The retry policy's default delays (retrypolicy.New): full jitter below
// a cap of 100 ms doubling to 10 s.
const (
	defaultBase = 100 * time.Millisecond
	defaultCap  = 10 * time.Second
)

// jitteredRetry is retrypolicy.New() with opts, its full jitter drawn from
// the call's own seeded source. retrypolicy draws its jitter from
// math/rand/v2's global source, which nothing can seed; so the policy's
// own delay is 0 (BaseDelay(0)) and each failed attempt carries, as a
// retry-after hint, the delay that retrypolicy.Full would draw, uniform in
// [0, min(base*2^n, cap)]: the retry waits that hint (capped by MaxDelay)
// and gives up at once if it would end past the deadline, as it does with
// its own draw. Same distribution, same look-ahead, reproducible.
func jitteredRetry(opts ...retrypolicy.Option) *retrypolicy.Policy {
	return retrypolicy.New(append([]retrypolicy.Option{retrypolicy.BaseDelay(0)}, opts...)...)
}

// pipelineCaller calls through p; each failed attempt carries the full
// jitter delay of its retry (see jitteredRetry), base 100 ms, cap 10 s:
// the policy's defaults, which every pipeline here keeps.
func pipelineCaller(p *pipeline.Pipeline) caller {
	return func(ctx context.Context, c *call) error {
		_, err := pipeline.Do(ctx, p, func(ctx context.Context) (struct{}, error) {
			n, err := c.attempt(ctx)
			if err != nil {
				err = resilience.RetryAfter(err, fullJitter(c.rand(streamJitter, n), n-1))
			}
			return struct{}{}, err
		})
		return err
	}
}

// fullJitter is retrypolicy.Full's delay before retry n (from 0) with the
// default base and cap: uniform in [0, min(base*2^n, cap)].
func fullJitter(r *rand.Rand, n uint64) time.Duration {
	c := defaultCap
	if n < 20 {
		c = min(defaultBase<<n, defaultCap)
	}
	return time.Duration(r.Int64N(int64(c) + 1))
}

// grpc-go's retry policy, as its service config would set it: the most
// attempts grpc-go allows (5), the initial backoff and cap of the outage
// comparison in grpc/grpcclient, and the retry throttling of that
// comparison.
const (
	grpcMaxAttempts    = 5
	grpcInitialBackoff = 100 * time.Millisecond
	grpcMaxBackoff     = time.Second
	grpcMultiplier     = 2
	grpcMaxTokens      = 10
	grpcTokenRatio     = 0.1
)

// grpcRetry is grpc-go's retry policy (google.golang.org/grpc v1.85.0,
// stream.go, csAttempt.shouldRetry): an attempt that failed with a
// retryable code (here UNAVAILABLE: a 503 or a refused connection) is
// retried, unless the throttler says no, while fewer than maxAttempts
// were made, after min(initialBackoff*multiplier^n, maxBackoff) times a
// factor in [0.8, 1.2]. It has no timeout per attempt: each attempt may
// take what is left of the call's deadline, and DEADLINE_EXCEEDED is not
// retried. Its delay is slept even if it ends past the deadline (the call
// then ends at the deadline). th may be nil: no retry throttling.
func grpcRetry(th *grpcThrottler) caller {
	return func(ctx context.Context, c *call) error {
		for retries := 0; ; retries++ {
			n, err := c.attempt(ctx)
			if err == nil {
				th.successfulRPC()
				return nil
			}
			if ctx.Err() != nil || !(errors.Is(err, errUnavailable) || errors.Is(err, errRefused)) {
				return err
			}
			if th.throttle() || retries+1 >= grpcMaxAttempts {
				return err
			}
			cur := min(float64(grpcInitialBackoff)*math.Pow(grpcMultiplier, float64(retries)), float64(grpcMaxBackoff))
			cur *= 0.8 + 0.4*c.rand(streamJitter, n).Float64()
			if sleepCtx(ctx, time.Duration(cur)) != nil {
				return ctx.Err()
			}
		}
	}
}

// grpcThrottler is grpc-go's retryThrottler (clientconn.go), one per
// channel: a failed attempt with a retryable code takes a token, a
// successful call gives back tokenRatio; retries stop while tokens <=
// maxTokens/2. Its methods are safe for concurrent use; a nil one never
// throttles.
type grpcThrottler struct {
	max, thresh, ratio float64

	mu     sync.Mutex
	tokens float64
}

func (rt *grpcThrottler) throttle() bool {
	if rt == nil {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.tokens = max(rt.tokens-1, 0)
	return rt.tokens <= rt.thresh
}

func (rt *grpcThrottler) successfulRPC() {
	if rt == nil {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.tokens = min(rt.tokens+rt.ratio, rt.max)
}

// failsafeCaller is failsafe-go v0.9.8's retry policy and circuit breaker
// with their defaults (retrypolicy.NewWithDefaults: 3 attempts, no delay,
// every error retried; circuitbreaker.NewWithDefaults: opens after one
// failure, half-open after a minute, closes after one success), composed
// as its docs show, Retry(CircuitBreaker(fn)); each attempt is capped at
// the scenario's attempt timeout, as a failsafe-go Timeout inside them
// would.
func failsafeCaller(sc *scenario) caller {
	exec := failsafe.With[any](fsretry.NewWithDefaults[any](), circuitbreaker.NewWithDefaults[any]())
	return func(ctx context.Context, c *call) error {
		_, err := exec.WithContext(ctx).Get(func() (any, error) {
			actx, cancel := context.WithTimeout(ctx, sc.attemptTimeout)
			defer cancel()
			_, err := c.attempt(actx)
			return nil, err
		})
		return err
	}
}

// oldOpenTimeout is the breaker's open timeout by default before the
// tables of docs/storm.md chose 100 ms: the -extra row that keeps it shows
// what the change bought.
const oldOpenTimeout = 30 * time.Second

// recommended are the options docs/retries.md recommends for sc: the
// defaults of the breaker (5 failures in a row, a probe every 100 ms) and
// of the retry policy, no attempt timeout
// (the backend's attempts never hang; an attempt timeout shorter than the
// queueing a slowdown builds is what turns it into a metastable failure),
// no retry quota (its 10% starves the retries of a brownout, a dead host
// and a flapping backend), and hedging at the p90 for a heavy tail.
func recommended(sc *scenario, retry newRetry) []pipeline.Option {
	opts := []pipeline.Option{
		pipeline.WithBreaker(breaker.New("backend")),
		pipeline.WithRetry(retry()),
	}
	if sc.key == "heavytail" {
		opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Quantile(0.9), hedge.MaxExtra(1))))
	}
	return opts
}

// Strategies the demo adds on request (-extra): the default pipeline with
// the breaker's former open timeout, 30 s, the default pipeline with an
// attempt timeout of 250 ms, and the recommended pipeline with a retry
// quota of 10% plus 10 a second.
const (
	openName    = "pipeline, defaults + OpenTimeout 30s"
	timeoutName = "pipeline, defaults + attempt timeout"
	waitName    = "pipeline, recommended + WaitWhenOpen"
	quotaName   = "pipeline, recommended + quota 10%"
)

// waitStrategy is the recommended pipeline with WaitWhenOpen (-wait). It is
// apart from the others: its outage row moves by several percent from run
// to run in virtual time (it depends on the order in which waiting
// goroutines run), so docs/storm.md quotes none.
var waitStrategy = pipelineStrategy(waitName, func(sc *scenario, retry newRetry) []pipeline.Option {
	return append(recommended(sc, retry), pipeline.WaitWhenOpen())
})

var extraStrategies = []strategy{
	pipelineStrategy(openName, defaultsWith(breaker.OpenTimeout(oldOpenTimeout))),
	pipelineStrategy(timeoutName, func(sc *scenario, retry newRetry) []pipeline.Option {
		return append(defaultsWith()(sc, retry), pipeline.WithAttemptTimeout(sc.attemptTimeout))
	}),
	pipelineStrategy(quotaName, func(sc *scenario, retry newRetry) []pipeline.Option {
		return append(recommended(sc, retry),
			pipeline.WithRetry(retry(retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, time.Second)))))
	}),
}
