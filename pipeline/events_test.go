package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// recorder keeps a line per event.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) OnEvent(e resilience.Event) {
	line := e.Name + " " + e.Kind.String()
	switch e.Kind {
	case resilience.EventAttempt:
		line += fmt.Sprintf(" %d ok=%v", e.Attempt, e.Err == nil)
	case resilience.EventRetry:
		line += fmt.Sprintf(" after %d in %v", e.Attempt, e.Delay)
	case resilience.EventStateChange:
		line += " " + e.From.String() + "->" + e.To.String()
	case resilience.EventCallDone:
		line += fmt.Sprintf(" %v ok=%v", e.Duration, e.Err == nil)
	}
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lines
	r.lines = nil
	return out
}

func TestEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(rec), // hears the breaker too
			pipeline.WithRetry(retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(3))))
		dep := &dependency{}

		calls := 0
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
			if calls++; calls < 3 {
				return 0, errDown
			}
			return 1, nil
		})
		assert.Equal(t, []string{
			"stock attempt 1 ok=false",
			"stock retry after 1 in 100ms",
			"stock attempt 2 ok=false",
			"stock retry after 2 in 200ms",
			"stock attempt 3 ok=true",
			"stock call_done 300ms ok=true",
		}, rec.take())

		dep.down.Store(true)
		_, _ = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { _, err := dep.call(ctx); return 0, err })
		_, _ = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { return 0, nil })
		assert.Equal(t, []string{
			"stock attempt 1 ok=false",
			"stock retry after 1 in 100ms",
			"stock attempt 2 ok=false",
			"stock retry after 2 in 200ms",
			"stock attempt 3 ok=false",
			"stock retries_exhausted",
			"stock state_change closed->open",
			"stock call_done 300ms ok=false",
			"stock rejected",
			"stock call_done 0s ok=false",
		}, rec.take())
	})
}

func TestGiveUpEvents(t *testing.T) {
	tests := []struct {
		name string
		opts []pipeline.Option
		want string
	}{
		{"time budget", []pipeline.Option{pipeline.WithTimeBudget(time.Second), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0)))}, "dep time_budget_exceeded"},
		{"retry quota", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(retrypolicy.NewQuota(0, 0, 0))))}, "dep quota_exhausted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				p := pipeline.New(append(tt.opts, pipeline.WithName("dep"), pipeline.WithListener(rec))...)
				_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
				assert.Contains(t, rec.take(), tt.want)
			})
		})
	}
}

func TestBreakerListenerHearsWhatAPipelineListenerHears(t *testing.T) {
	own, heard := &recorder{}, &recorder{}
	b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.WithListener(own))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(heard))
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, nil })
	assert.Equal(t, []string{"stock state_change closed->open", "stock rejected"}, own.take(),
		"the breaker's own listener: its state changes and rejections")
	assert.Equal(t, []string{
		"stock attempt 1 ok=false",
		"stock state_change closed->open",
		"stock call_done ok=false",
		"stock rejected",
		"stock call_done ok=false",
	}, withoutDurations(heard.take()), "the pipeline's: its calls and its breaker's state changes, each once")
}

func TestListenerGivenTwiceHearsEachEventOnce(t *testing.T) {
	rec := &recorder{}
	b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.WithListener(rec))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(rec))
	pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(rec)) // a second pipeline on the same breaker
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, nil })
	assert.Equal(t, []string{
		"stock attempt 1 ok=false",
		"stock state_change closed->open",
		"stock call_done ok=false",
		"stock rejected",
		"stock call_done ok=false",
	}, withoutDurations(rec.take()))
}

// TestOneListenerOfSeveralPipelinesHearsEachChangeOnce: an app-wide
// listener given to every pipeline, two of them on one breaker, counts
// each state change once.
func TestOneListenerOfSeveralPipelinesHearsEachChangeOnce(t *testing.T) {
	rec := &recorder{}
	b := breaker.New("stock", breaker.ConsecutiveFailures(1))
	base := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(rec))
	derived := base.With(pipeline.WithName("stock"))
	_, _ = pipeline.Do(t.Context(), derived, func(context.Context) (int, error) { return 0, errDown })
	assert.Equal(t, []string{"stock attempt 1 ok=false", "stock state_change closed->open", "stock call_done ok=false"},
		withoutDurations(rec.take()))
	runtime.KeepAlive(base)
}

// TestEveryPipelineHearsItsBreaker: pipelines that share a breaker hear
// the same state changes, whichever was built first and whichever made
// the call that changed the state; each hears only its own calls.
func TestEveryPipelineHearsItsBreaker(t *testing.T) {
	for _, order := range []string{"first built calls", "last built calls"} {
		t.Run(order, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r1, r2 := &recorder{}, &recorder{}
				b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
				p1 := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(r1))
				p2 := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(r2))
				caller, other := p1, r2
				mine := r1
				if order == "last built calls" {
					caller, other, mine = p2, r1, r2
				}
				_, _ = pipeline.Do(t.Context(), caller, func(context.Context) (int, error) { return 0, errDown })
				time.Sleep(2 * time.Second)
				_, _ = pipeline.Do(t.Context(), caller, func(context.Context) (int, error) { return 1, nil })
				changes := []string{"stock state_change closed->open", "stock state_change open->half-open", "stock state_change half-open->closed"}
				assert.Equal(t, changes, other.take(), "the pipeline that made no call hears every change")
				assert.Equal(t, []string{
					"stock attempt 1 ok=false", changes[0], "stock call_done ok=false",
					changes[1], "stock attempt 1 ok=true", changes[2], "stock call_done ok=true",
				}, withoutDurations(mine.take()))
			})
		})
	}
}

// owner is a listener that refers back to its pipeline, as a client
// that holds both might.
type owner struct {
	p     *pipeline.Pipeline
	heard *atomic.Int64
}

func (o *owner) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventStateChange {
		o.heard.Add(1)
	}
}

// TestUnusedPipelinesStopListening: pipelines built per request and
// dropped leave nothing behind on their breaker once collected, even
// those whose listener refers back to them.
func TestUnusedPipelinesStopListening(t *testing.T) {
	var heard atomic.Int64
	counter := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange {
			heard.Add(1)
		}
	})
	b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Millisecond))
	kept := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(counter))
	for range 100 {
		pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(counter))
		o := &owner{heard: &heard}
		o.p = pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(o))
	}
	require.Eventually(t, func() bool {
		runtime.GC()
		heard.Store(0)
		_ = b.Execute(t.Context(), func(context.Context) error { return errDown }) // opens it
		time.Sleep(2 * time.Millisecond)
		_ = b.Execute(t.Context(), func(context.Context) error { return nil }) // closes it
		return heard.Load() == 3                                               // the kept pipeline's alone
	}, 5*time.Second, 10*time.Millisecond, "dropped pipelines still listen")
	runtime.KeepAlive(kept)
}

func TestRetriesStoppedByTheBreakerAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(rec),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(3))))
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
			_ = b.Execute(t.Context(), func(context.Context) error { return errDown }) // another call opens it
			return 0, errDown
		})
		require.ErrorIs(t, err, breaker.ErrOpen)
		assert.Equal(t, []string{
			"stock state_change closed->open",
			"stock attempt 1 ok=false",
			"stock rejected",
			"stock call_done ok=false",
		}, withoutDurations(rec.take()))
	})
}

// withoutDurations drops the measured durations of call_done lines.
func withoutDurations(lines []string) []string {
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 4 && f[1] == "call_done" {
			lines[i] = f[0] + " " + f[1] + " " + f[3]
		}
	}
	return lines
}

// TestNoListenerNoEvents: a pipeline without a listener reports nothing,
// even to a listener that another pipeline on the same breaker and the same
// policy was given, and its success path costs no allocation.
func TestNoListenerNoEvents(t *testing.T) {
	rec := &recorder{}
	b := breaker.New("dep")
	policy := retrypolicy.New()
	pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(policy), pipeline.WithListener(rec))
	quiet := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(policy))
	op := func(context.Context) (int, error) { return 1, nil }
	allocs := testing.AllocsPerRun(100, func() { _, _ = pipeline.Do(context.Background(), quiet, op) })
	assert.Empty(t, rec.take(), "the quiet pipeline's calls reach no listener")
	assert.Zero(t, allocs)

	_, _ = retrypolicy.Do(t.Context(), policy, op)
	assert.Empty(t, rec.take(), "nor does the policy, which New did not change")
}

func TestPanickingListenerChangesNoOutcome(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	panicky := resilience.ListenerFunc(func(e resilience.Event) { panic("listener bug on " + e.Kind.String()) })
	b := breaker.New("dep", breaker.ConsecutiveFailures(1),
		breaker.WithListener(resilience.ListenerFunc(func(resilience.Event) { panic("breaker listener bug") })))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(panicky),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))))

	got, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err, "a success stays a success")
	assert.Equal(t, 7, got)
	assert.Equal(t, resilience.StateClosed, b.State())
	assert.EqualValues(t, 1, b.Counts().TotalSuccesses, "and the breaker counted a success")

	_, err = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, resilience.Terminal(errDown) })
	require.ErrorIs(t, err, errDown)
	assert.Equal(t, resilience.StateOpen, b.State(), "the breaker opened despite its panicking listeners")
	_, err = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 7, nil })
	require.ErrorIs(t, err, breaker.ErrOpen)
	assert.Contains(t, logged.String(), "listener bug on attempt", "the panic is logged, not lost")
	assert.Contains(t, logged.String(), "breaker listener bug")
}

func TestPanickingListenerSilencesNoOtherListener(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.DiscardHandler))
	rec := &recorder{}
	panicky := resilience.ListenerFunc(func(resilience.Event) { panic("listener bug") })
	p := pipeline.New(pipeline.WithName("dep"), pipeline.WithListener(panicky), pipeline.WithListener(rec))
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
	assert.Equal(t, []string{"dep attempt 1 ok=true", "dep call_done ok=true"}, withoutDurations(rec.take()))
}

// panickyFilter is a listener whose Wants panics for the kinds in bad.
type panickyFilter struct {
	bad   resilience.EventKind
	heard *[]resilience.EventKind
}

func (f panickyFilter) Wants(k resilience.EventKind) bool {
	if k == f.bad {
		panic("Wants bug")
	}
	return true
}

func (f panickyFilter) OnEvent(e resilience.Event) { *f.heard = append(*f.heard, e.Kind) }

// TestPanickingWantsCountsAsNo: a listener whose Wants panics for a kind
// does not hear that kind, hears the others, and the panic is logged;
// the call and the other listeners are as if it had not.
func TestPanickingWantsCountsAsNo(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	var heard []resilience.EventKind
	rec := &recorder{}
	p := pipeline.New(pipeline.WithName("dep"), pipeline.WithListener(panickyFilter{bad: resilience.EventAttempt, heard: &heard}),
		pipeline.WithListener(rec))
	got, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	assert.Equal(t, 1, got)
	assert.Equal(t, []resilience.EventKind{resilience.EventCallDone}, heard)
	assert.Equal(t, []string{"dep attempt 1 ok=true", "dep call_done ok=true"}, withoutDurations(rec.take()))
	assert.Contains(t, logged.String(), "listener's Wants panicked")
}

// TestSingleAttemptReportsWhatWasNotRetried: a call made with one attempt
// that fails in a way a retry might fix is reported as not retried, if the
// pipeline retries; a success, an answer not to retry, or a pipeline
// without a retry stage, are not.
func TestSingleAttemptReportsWhatWasNotRetried(t *testing.T) {
	tests := []struct {
		name  string
		retry bool
		err   error
		want  []string
	}{
		{"transient, retrying pipeline", true, errDown, []string{"dep attempt 1 ok=false", "dep not_retried"}},
		{"unrepeatable, retrying pipeline", true, resilience.Unrepeatable(errDown), []string{"dep attempt 1 ok=false", "dep not_retried"}},
		{"permanent", true, resilience.Permanent(errDown), []string{"dep attempt 1 ok=false"}},
		{"success", true, nil, []string{"dep attempt 1 ok=true"}},
		{"no retry stage", false, errDown, []string{"dep attempt 1 ok=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			opts := []pipeline.Option{pipeline.WithName("dep"), pipeline.WithListener(rec)}
			if tt.retry {
				opts = append(opts, pipeline.WithRetry(retrypolicy.New()))
			}
			_, _ = pipeline.Do(t.Context(), pipeline.New(opts...), func(context.Context) (int, error) { return 1, tt.err }, pipeline.SingleAttempt())
			got := withoutDurations(rec.take())
			require.NotEmpty(t, got)
			assert.Equal(t, tt.want, got[:len(got)-1], "then call_done")
		})
	}
}

// askCounter is a filter listener that wants every event and counts how
// often it is asked, by kind.
type askCounter struct {
	mu    sync.Mutex
	asked map[resilience.EventKind]int
	heard map[resilience.EventKind]int
}

func (a *askCounter) Wants(k resilience.EventKind) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[k]++
	return true
}

func (a *askCounter) OnEvent(e resilience.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.heard[e.Kind]++
}

// TestListenerAskedOnceAnEvent: a filter listener is asked once whether
// it wants a call's end and its attempt, and hears each once.
func TestListenerAskedOnceAnEvent(t *testing.T) {
	for _, opts := range [][]pipeline.Option{
		{pipeline.WithBreaker(breaker.New("b")), pipeline.WithRetry(retrypolicy.New())},
		{pipeline.WithRetry(retrypolicy.New())},
	} {
		l := &askCounter{asked: map[resilience.EventKind]int{}, heard: map[resilience.EventKind]int{}}
		p := pipeline.New(append(opts, pipeline.WithListener(l))...)
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
		for _, k := range []resilience.EventKind{resilience.EventCallDone, resilience.EventAttempt} {
			assert.Equal(t, 1, l.asked[k], "asked about %v", k)
			assert.Equal(t, 1, l.heard[k], "heard %v", k)
		}
	}
	t.Run("three attempts", func(t *testing.T) {
		l := &askCounter{asked: map[resilience.EventKind]int{}, heard: map[resilience.EventKind]int{}}
		p := pipeline.New(pipeline.WithBreaker(breaker.New("b")), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Nanosecond), retrypolicy.MaxDelay(time.Nanosecond))))
		n := 0
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
			if n++; n < 3 {
				return 0, fmt.Errorf("transient %d", n)
			}
			return 1, nil
		})
		require.NoError(t, err)
		assert.Equal(t, 1, l.asked[resilience.EventAttempt], "asked once, as the call started")
		assert.Equal(t, 3, l.heard[resilience.EventAttempt])
	})
}
