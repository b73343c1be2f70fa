package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review27Rec struct {
	mu     sync.Mutex
	events []resilience.Event
}

func (r *review27Rec) OnEvent(e resilience.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *review27Rec) attempts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n []int
	for _, e := range r.events {
		if e.Kind == resilience.EventAttempt {
			n = append(n, e.Attempt)
		}
	}
	return n
}

// A retry that waited for a slot of the concurrency limit while an operator
// forced the breaker open is not sent (reopened) and the call waits out the
// breaker. Once let through, the call must go on within MaxAttempts: the
// promise is "the retry policy's MaxAttempts holds over the whole call,
// waits included".
func TestReview27_ReopenedWhileQueuedForLimit_ExceedsMaxAttempts(t *testing.T) {
	for _, mode := range []breaker.Mode{breaker.ForcedClosed, breaker.Disabled} {
		t.Run(mode.String(), func(t *testing.T) { review27Reopened(t, mode) })
	}
}

func review27Reopened(t *testing.T, mode breaker.Mode) {
	b := breaker.New("review27-limit", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(2*time.Second))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	rec := &review27Rec{}
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
			retrypolicy.BaseDelay(30*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
		pipeline.WithLimit(lim),
		pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithListener(rec),
	)

	var sent atomic.Int32
	holderDone := make(chan struct{})
	var once sync.Once
	errDep := errors.New("connection reset")
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n := sent.Add(1)
		if n == 1 {
			once.Do(func() {
				queued := make(chan struct{})
				go func() {
					defer close(holderDone)
					close(queued)
					tk, err := lim.Acquire(context.Background()) // queued behind attempt 1
					if err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond) // attempt 2 queues behind us meanwhile
					for i := 0; i < 2; i++ {           // other calls fail: the breaker opens (3 in a row with attempt 1)
						_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
					}
					t.Logf("breaker state before release: %v", b.State())
					lim.Release(tk, nil)
					time.Sleep(100 * time.Millisecond)
					_ = b.SetMode(context.Background(), mode, "review27") // the operator lets calls through
				}()
				<-queued
				time.Sleep(10 * time.Millisecond)
			})
		}
		return 0, errDep
	})
	<-holderDone
	require.Error(t, err)
	t.Logf("err=%v sent=%d attempts=%v", err, sent.Load(), rec.attempts())
	var re *retrypolicy.Error
	if errors.As(err, &re) {
		t.Logf("Error.Attempts=%d", re.Attempts)
	}
	assert.LessOrEqual(t, int(sent.Load()), 3, "operation ran more than MaxAttempts(3) times over the call")
	nums := rec.attempts()
	for i := 1; i < len(nums); i++ {
		assert.Greater(t, nums[i], nums[i-1], "attempt numbers must go on across waits: %v", nums)
	}
}

// A call whose retries the breaker stopped (before the quota was charged)
// resumes; its resumed retry queues for a slot of the limit and the breaker
// opens again meanwhile: not sent, the call waits again, then resumes
// again. The promise: "the retry quota is charged once for the retry the
// breaker refused"; and attempts numbered on across waits.
func TestReview27_ResumedRetryReopenedChargesQuotaTwice(t *testing.T) {
	b := breaker.New("review27-quota", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(2*time.Second))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	q := retrypolicy.NewQuota(0, 100, 100*time.Second) // floor only: 1,000 retries in the first 10 s bucket
	rec := &review27Rec{}
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithQuota(q),
			retrypolicy.BaseDelay(time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
		pipeline.WithLimit(lim),
		pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithListener(rec),
	)
	before := q.Available()
	errDep := errors.New("connection reset")
	var sent atomic.Int32
	done := make(chan struct{})
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if sent.Add(1) == 1 {
			for i := 0; i < 2; i++ { // other calls fail meanwhile: the breaker opens before the retry is scheduled
				_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
			}
			require.Equal(t, resilience.StateOpen, b.State())
			go func() {
				defer close(done)
				time.Sleep(50 * time.Millisecond) // attempt 1 is over, the call waits
				tk, err := lim.Acquire(context.Background())
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				_ = b.SetMode(context.Background(), breaker.Disabled, "review27") // lets the call through: resume, attempt 2 queues
				time.Sleep(100 * time.Millisecond)
				_ = b.SetMode(context.Background(), breaker.Normal, "review27") // still open
				lim.Release(tk, nil)                                            // attempt 2 gets the slot: reopened, not sent
				time.Sleep(100 * time.Millisecond)
				_ = b.SetMode(context.Background(), breaker.Disabled, "review27") // through again
			}()
		}
		return 0, errDep
	})
	<-done
	_ = b.SetMode(context.Background(), breaker.Normal, "review27")
	retries := 0
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == resilience.EventRetry {
			retries++
		}
	}
	rec.mu.Unlock()
	charged := before - q.Available()
	t.Logf("err=%v sent=%d attempts=%v EventRetry=%d quota charged=%d", err, sent.Load(), rec.attempts(), retries, charged)
	require.Error(t, err)
	assert.LessOrEqual(t, int(sent.Load()), 3)
	assert.Equal(t, int(sent.Load())-1, charged, "quota charged once per retry sent")
	nums := rec.attempts()
	for i := 1; i < len(nums); i++ {
		assert.Greater(t, nums[i], nums[i-1], "attempt numbers must go on across waits: %v", nums)
	}
}

// The same as TestReview27_ReopenedWhileQueuedForLimit_ExceedsMaxAttempts
// with no operator: the breaker opens on other calls' failures while the
// call's retry queues for the limit, and closes again on another waiting
// call's successful probe.
func TestReview27_ReopenedWhileQueuedForLimit_NaturalClose(t *testing.T) {
	b := breaker.New("review27-natural", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(1))
	lim := limit.NewFixed(1, limit.MaxWaiting(4))
	rec := &review27Rec{}
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
			retrypolicy.BaseDelay(30*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
		pipeline.WithLimit(lim),
		pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithListener(rec),
	)
	other := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(10*time.Second))

	var sent atomic.Int32
	holderDone := make(chan struct{})
	otherErr := make(chan error, 1)
	errDep := errors.New("connection reset")
	_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if sent.Add(1) == 1 {
			queued := make(chan struct{})
			go func() {
				defer close(holderDone)
				close(queued)
				tk, err := lim.Acquire(context.Background()) // queued behind attempt 1
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				time.Sleep(100 * time.Millisecond) // attempt 2 queues behind us meanwhile
				for i := 0; i < 2; i++ {           // other calls fail: the breaker opens
					_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
				}
				go func() { // another caller, with more time left, waits too and probes successfully
					_, err := pipeline.Do(context.Background(), other, func(context.Context) (int, error) { return 1, nil })
					otherErr <- err
				}()
				time.Sleep(20 * time.Millisecond)
				lim.Release(tk, nil) // attempt 2 gets the slot: reopened, not sent; the call waits
			}()
			<-queued
			time.Sleep(10 * time.Millisecond)
		}
		return 0, errDep
	})
	<-holderDone
	require.NoError(t, <-otherErr)
	t.Logf("err=%v sent=%d attempts=%v", err, sent.Load(), rec.attempts())
	require.Error(t, err)
	assert.LessOrEqual(t, int(sent.Load()), 3, "operation ran more than MaxAttempts(3) times over the call")
	nums := rec.attempts()
	for i := 1; i < len(nums); i++ {
		assert.Greater(t, nums[i], nums[i-1], "attempt numbers must go on across waits: %v", nums)
	}
}

// A resumed loop whose attempt panics: the panic reaches the caller, and
// the pipeline is left usable: the next call against a healthy dependency
// succeeds at once (no pacer slot or backlog left behind).
func TestReview27_ResumedAttemptPanics(t *testing.T) {
	b := breaker.New("review27-panic", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(2*time.Second))
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithLimit(limit.NewFixed(1)),
		pipeline.WaitWhenOpen(),
		pipeline.WithTimeBudget(5*time.Second),
	)
	errDep := errors.New("connection reset")
	var n atomic.Int32
	assert.PanicsWithValue(t, "boom", func() {
		_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				for i := 0; i < 2; i++ {
					_ = b.Execute(context.Background(), func(context.Context) error { return errDep })
				}
				go func() {
					time.Sleep(50 * time.Millisecond)
					_ = b.SetMode(context.Background(), breaker.ForcedClosed, "review27")
				}()
				return 0, errDep
			}
			panic("boom")
		})
	})
	assert.Equal(t, int32(2), n.Load())
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
		cancel()
		require.NoError(t, err)
		require.Equal(t, 1, v)
	}
}
