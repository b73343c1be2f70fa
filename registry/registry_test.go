package registry_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errDown = errors.New("connection refused")

func TestTheSameNameTwiceIsAnError(t *testing.T) {
	r := registry.New()
	b := breaker.New("payments")
	defer runtime.KeepAlive(b) // the registry holds it weakly
	require.NoError(t, r.AddBreaker(b))
	require.NoError(t, r.AddBreaker(b), "the same breaker again is no error")
	assert.ErrorIs(t, r.AddBreaker(breaker.New("payments")), registry.ErrDuplicate)
	got, ok := r.Breaker("payments")
	require.True(t, ok)
	assert.Same(t, b, got, "not overwritten")

	charge, err := r.AddPipeline(pipeline.New(pipeline.WithName("charge")))
	require.NoError(t, err)
	defer runtime.KeepAlive(charge) // the registry holds it weakly
	_, err = r.AddPipeline(pipeline.New(pipeline.WithName("charge")))
	assert.ErrorIs(t, err, registry.ErrDuplicate)
	_, err = r.AddPipeline(pipeline.New(pipeline.WithName("refund"), pipeline.WithBreaker(breaker.New("payments"))))
	assert.ErrorIs(t, err, registry.ErrDuplicate, "its breaker's name is another breaker's")
	_, err = r.AddPipeline(pipeline.New())
	assert.ErrorIs(t, err, registry.ErrNoName)
	assert.ErrorIs(t, r.AddBreaker(&breaker.Breaker{}), registry.ErrNoName)

	assert.True(t, r.RemovePipeline("charge"))
	assert.False(t, r.RemovePipeline("charge"))
	_, err = r.AddPipeline(pipeline.New(pipeline.WithName("charge")))
	assert.NoError(t, err, "free again once removed")
	assert.True(t, r.RemoveBreaker("payments"))
	assert.ErrorIs(t, r.SetMode(t.Context(), "payments", breaker.ForcedOpen, "x"), registry.ErrNotFound)
}

func TestAPipelineRegistersItsBreaker(t *testing.T) {
	r := registry.New()
	b := breaker.New("payments")
	p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
	require.NoError(t, err)
	defer runtime.KeepAlive(p)
	bs, ps := r.Names()
	assert.Equal(t, []string{"payments"}, bs)
	assert.Equal(t, []string{"payments"}, ps)
	require.NoError(t, r.SetMode(t.Context(), "payments", breaker.ForcedOpen, "alice"))
	assert.ErrorIs(t, b.Execute(t.Context(), func(context.Context) error { return nil }), breaker.ErrForcedOpen)
}

func TestWhatIsNoLongerUsedIsUnregistered(t *testing.T) {
	r := registry.New()
	func() {
		p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("gone"))))
		require.NoError(t, err)
		_ = p
	}()
	for range 20 {
		runtime.GC()
		if bs, ps := r.Names(); len(bs) == 0 && len(ps) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	bs, ps := r.Names()
	t.Fatalf("still registered: %v %v", bs, ps)
}

func TestPipelineFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := registry.New(registry.Interval(time.Second, 10))
		quota := retrypolicy.NewQuota(0.5, 10, time.Minute)
		lim := limit.NewFixed(7)
		p, err := r.AddPipeline(pipeline.New(
			pipeline.WithName("orders"),
			pipeline.WithBreaker(breaker.New("orders-db", breaker.ConsecutiveFailures(0))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithQuota(quota), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithLimit(lim),
		))
		require.NoError(t, err)
		th := throttle.New()
		_, err = r.AddPipeline(pipeline.New(pipeline.WithName("throttled"), pipeline.WithThrottle(th)))
		require.NoError(t, err)
		start := time.Now()
		fails := 0
		op := func(context.Context) (int, error) {
			fails++
			if fails%2 == 1 {
				return 0, errDown // every call's first attempt fails, its retry succeeds
			}
			return 1, nil
		}
		for range 40 {
			time.Sleep(10 * time.Millisecond)
			_, err := pipeline.Do(t.Context(), p, op)
			require.NoError(t, err)
		}
		time.Sleep(time.Second - 400*time.Millisecond)
		s := r.Snapshot()
		require.Len(t, s.Pipelines, 2)
		ps := s.Pipelines[0]
		assert.Equal(t, "orders", ps.Name)
		assert.Equal(t, th.RejectProbability(), s.Pipelines[1].RejectProbability)
		assert.Equal(t, -1.0, ps.RejectProbability, "no throttle")
		assert.Equal(t, -1, s.Pipelines[1].QuotaLeft, "no quota")
		assert.Equal(t, -1, s.Pipelines[1].Limit, "no limit")
		assert.Equal(t, "orders-db", ps.Breaker)
		assert.EqualValues(t, 40, ps.Calls)
		assert.EqualValues(t, 80, ps.Attempts)
		assert.EqualValues(t, 40, ps.Retries)
		assert.EqualValues(t, 40, ps.Successes)
		assert.Zero(t, ps.Failures)
		span := time.Since(start).Seconds() // a little over 1 s: the retries' delays
		assert.InDelta(t, 40/span, ps.CallsPerSec, 1e-9, "40 calls in the first interval")
		assert.InDelta(t, 80/span, ps.AttemptsPerSec, 1e-9)
		assert.InDelta(t, 1, ps.RetryRatio, 1e-9)
		assert.Equal(t, quota.Available(), ps.QuotaLeft)
		assert.Equal(t, 7, ps.Limit)
		assert.Zero(t, ps.InFlight)
		assert.Equal(t, []uint64{40}, ps.Series.Successes)
		assert.Equal(t, []uint64{0}, ps.Series.Failures)

		require.Len(t, s.Breakers, 1)
		assert.Equal(t, []string{"orders"}, s.Breakers[0].Pipelines)
		assert.Equal(t, []uint64{40}, s.Breakers[0].Series.Successes, "a breaker's series are its pipelines'")

		// Two intervals nobody looked at: an empty point, then the gap's.
		time.Sleep(2 * time.Second)
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, resilience.Permanent(errDown) })
		s = r.Snapshot()
		assert.Equal(t, []uint64{40, 0, 0}, s.Pipelines[0].Series.Successes)
		assert.Equal(t, []uint64{0, 0, 1}, s.Pipelines[0].Series.Failures)
	})
}

func TestRejectionsAndLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := registry.New()
		b := breaker.New("flaky", breaker.ConsecutiveFailures(1))
		p, err := r.AddPipeline(pipeline.New(pipeline.WithBreaker(b)))
		require.NoError(t, err)
		slow := func(context.Context) (int, error) { time.Sleep(5 * time.Millisecond); return 1, nil }
		for range 2 * registry.SampleEvery {
			_, err := pipeline.Do(t.Context(), p, slow)
			require.NoError(t, err)
		}
		ps := r.Snapshot().Pipelines[0]
		assert.Equal(t, 5*time.Millisecond, ps.P50, "sampled calls, timed on the fake clock")
		assert.Equal(t, 5*time.Millisecond, ps.P99)
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
		for range 3 {
			_, err := pipeline.Do(t.Context(), p, slow)
			require.ErrorIs(t, err, breaker.ErrOpen)
		}
		s := r.Snapshot()
		ps = s.Pipelines[0]
		assert.EqualValues(t, 3, ps.Rejected)
		assert.EqualValues(t, 2*registry.SampleEvery+4, ps.Calls)
		assert.EqualValues(t, 1, ps.Failures)
		assert.Equal(t, resilience.StateOpen, s.Breakers[0].State)
	})
}

// TestAStopBetweenRetriesIsNoRejectedCall: a call whose retries the
// breaker stops (another call opened it) is one failed call, not a
// rejected one.
func TestAStopBetweenRetriesIsNoRejectedCall(t *testing.T) {
	r := registry.New()
	p, err := r.AddPipeline(pipeline.New(
		pipeline.WithBreaker(breaker.New("shaky", breaker.ConsecutiveFailures(1))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
	))
	require.NoError(t, err)
	_, err = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
		// Another call fails meanwhile, and opens the breaker.
		_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 0, resilience.Terminal(errDown) })
		return 0, errDown
	})
	require.ErrorIs(t, err, breaker.ErrOpen, "the retry was stopped")
	ps := r.Snapshot().Pipelines[0]
	assert.EqualValues(t, 2, ps.Calls)
	assert.EqualValues(t, 2, ps.Failures)
	assert.Zero(t, ps.Rejected, "no call was refused")
}

// closedStore keeps a fleet closed.
type closedStore struct{}

func (closedStore) Sync(context.Context, string, breaker.Sync) (breaker.Fleet, error) {
	return breaker.Fleet{}, nil
}

func TestASharedBreakerIsUnregisteredOnceClosed(t *testing.T) {
	r := registry.New()
	b := breaker.New("fleet", breaker.Shared(closedStore{}), breaker.FailureRate(0.5, 10))
	require.NoError(t, r.AddBreaker(b))
	require.Len(t, r.Snapshot().Breakers, 1)
	require.NoError(t, b.Close())
	assert.Empty(t, r.Snapshot().Breakers)
	assert.NoError(t, r.AddBreaker(breaker.New("fleet")), "the name is free again")
}

// attemptsHeard counts the attempts a listener of the caller's own hears.
type attemptsHeard struct{ n int }

func (a *attemptsHeard) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventAttempt {
		a.n++
	}
}

// TestAttemptsAreCountedOnceWhateverListensBeside: the registry's counts
// of attempts, which the pipeline keeps without an event, are the same
// with listeners of the caller's own on the pipeline and on its retry
// policy, which still hear every attempt, with or without a retry stage,
// and in two registries at once.
func TestAttemptsAreCountedOnceWhateverListensBeside(t *testing.T) {
	mine, policy := &attemptsHeard{}, &attemptsHeard{}
	r1, r2 := registry.New(), registry.New()
	retried, err := r1.AddPipeline(pipeline.New(
		pipeline.WithName("retried"),
		pipeline.WithListener(mine),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.WithListener(policy))),
	))
	require.NoError(t, err)
	twice, err := r2.AddPipeline(retried)
	require.NoError(t, err)
	once, err := r1.AddPipeline(pipeline.New(pipeline.WithName("once"), pipeline.WithListener(mine)))
	require.NoError(t, err)

	flaky := func() resilience.Operation[int] {
		n := 0
		return func(context.Context) (int, error) {
			n++
			if n%2 == 1 {
				return 0, errDown
			}
			return 1, nil
		}
	}
	retriedOp, onceOp := flaky(), flaky()
	for range 3 {
		_, err := pipeline.Do(t.Context(), twice, retriedOp)
		require.NoError(t, err)
		_, _ = pipeline.Do(t.Context(), once, onceOp)
		_, _ = pipeline.Do(t.Context(), once, onceOp)
	}
	assert.Equal(t, 6+6, mine.n, "6 attempts retried, 6 once")
	assert.Equal(t, 6, policy.n)
	for _, r := range []*registry.Registry{r1, r2} {
		ps := r.Snapshot().Pipelines
		i := slices.IndexFunc(ps, func(ps registry.PipelineState) bool { return ps.Name == "retried" })
		require.GreaterOrEqual(t, i, 0)
		assert.EqualValues(t, 3, ps[i].Calls)
		assert.EqualValues(t, 6, ps[i].Attempts)
		assert.EqualValues(t, 3, ps[i].Successes)
		assert.EqualValues(t, 3, ps[i].Retries)
	}
	ps := r1.Snapshot().Pipelines
	require.Len(t, ps, 2)
	assert.Equal(t, "once", ps[0].Name)
	assert.EqualValues(t, 6, ps[0].Calls)
	assert.EqualValues(t, 6, ps[0].Attempts)
	assert.EqualValues(t, 3, ps[0].Successes)
	assert.EqualValues(t, 3, ps[0].Failures)
}

func TestTheHappyPathOfARegisteredPipelineAllocatesNothing(t *testing.T) {
	p, err := registry.New().AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("allocs")), pipeline.WithRetry(retrypolicy.New())))
	require.NoError(t, err)
	op := func(context.Context) (int, error) { return 1, nil }
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(t.Context(), p, op) }))
}

// TestNamesMustBeValidUTF8: a name that is not valid UTF-8 is refused, a
// breaker's and a pipeline's: in the JSON of the dashboard its bad bytes
// would become U+FFFD, and "db\xff", "db\xfe" and "db\uFFFD" one name.
func TestNamesMustBeValidUTF8(t *testing.T) {
	r := registry.New()
	require.ErrorIs(t, r.AddBreaker(breaker.New("db\xff")), registry.ErrInvalidName)
	require.NoError(t, r.AddBreaker(breaker.New("db\uFFFD")), "U+FFFD itself is valid")
	_, err := r.AddPipeline(pipeline.New(pipeline.WithName("db\xfe")))
	require.ErrorIs(t, err, registry.ErrInvalidName)
	_, err = r.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("q\xff"))))
	require.ErrorIs(t, err, registry.ErrInvalidName, "named after its breaker")
	breakers, pipelines := r.Names()
	assert.Equal(t, []string{"db\uFFFD"}, breakers)
	assert.Empty(t, pipelines)
}
