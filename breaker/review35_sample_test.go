package breaker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

const review35Span = 10 * time.Second

// review35SleepUntil sleeps until the monotonic reading r.
func review35SleepUntil(r monotime.Reading) {
	if d := time.Duration(r - monotime.Now()); d > 0 {
		time.Sleep(d)
	}
}

// review35Scenario: a service whose traffic came in a burst (20 quick
// answers in one 10 s span), then goes quiet: one caller at a time. The
// dependency is healthy; one of its answers takes 300 ms. Then five
// callers with a 200 ms budget (more than 100 ms, less than the slowest
// answer of the last minute) run out of time. The package doc: "The
// breaker times, from their admission, the first 16 answers of every 10
// s" and leaves out a call that "had less time than ... the slowest
// answer of the last minute". straggler: one call of the burst, admitted
// 30 ms before the span ends, answers just after the first answer of the
// next span (a 40 ms answer: nothing slow). Returns the breaker's state.
func review35Scenario(t *testing.T, straggler bool) (resilience.State, breaker.Counts) {
	made := monotime.Now()
	b := breaker.New("dep")
	ctx := context.Background()
	quick := func(context.Context) error { return nil }

	// The breaker counts its spans from its making: the first ends 10 s
	// after it (a few µs after boundary).
	boundary := made + monotime.Reading(review35Span)
	review35SleepUntil(boundary - monotime.Reading(5*time.Second))
	for range 20 { // the burst: 16 timed, the rest drawn
		require.NoError(t, b.Execute(ctx, quick))
	}

	release := make(chan struct{})
	var wg sync.WaitGroup
	if straggler {
		review35SleepUntil(boundary - monotime.Reading(30*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, b.Execute(ctx, func(context.Context) error { <-release; return nil }))
		}()
	}
	review35SleepUntil(boundary + monotime.Reading(5*time.Millisecond))
	require.NoError(t, b.Execute(ctx, quick)) // the first answer of the new span
	close(release)
	wg.Wait()

	// A healthy answer of 300 ms: the second answer of its span.
	require.NoError(t, b.Execute(ctx, func(context.Context) error { time.Sleep(300 * time.Millisecond); return nil }))

	// Five callers with a 200 ms budget run out of time.
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := b.Execute(cctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		cancel()
		require.Error(t, err)
	}
	return b.State(), b.Counts()
}

// TestReview35StragglerSkipsTheFirstAnswersOfASpan: a call of the
// previous span that answers after the first answer of the new one
// draws the "one in 16" skip for the new span, whose next answers (the
// 2nd to the 16th, promised to be timed) then go untimed; in a quiet
// period "until the latest admission" is 0, so a 300 ms answer is not
// seen, and callers with 200 ms budgets open the breaker of a healthy
// dependency.
func TestReview35StragglerSkipsTheFirstAnswersOfASpan(t *testing.T) {
	t.Run("control: no straggler", func(t *testing.T) {
		st, n := review35Scenario(t, false)
		assert.Equal(t, resilience.StateClosed, st, "counts %+v", n)
	})
	t.Run("straggler", func(t *testing.T) {
		st, n := review35Scenario(t, true)
		assert.Equal(t, resilience.StateClosed, st,
			"a 300 ms answer, the 2nd of its span, was not timed: 200 ms budgets opened the breaker (counts %+v)", n)
	})
}
