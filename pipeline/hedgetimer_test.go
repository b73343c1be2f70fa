package pipeline

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// firedAt is a race that records when it fired.
type firedAt struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
}

func (f *firedAt) fire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Since(f.start))
}

func (f *firedAt) fired() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// TestHedgeTimersFireEachRaceWhenDue: races added in any order, with any
// delay, some removed before they are due, each fire once, exactly when
// due, and the removed never; the timer left set for a race that answered
// fires a later one on time.
func TestHedgeTimersFireEachRaceWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timers := testTimers()
		rng := rand.New(rand.NewPCG(1, 2))
		type entry struct {
			race    *firedAt
			due     hedgeDue
			delay   time.Duration
			removed bool
		}
		entries := make([]*entry, 200)
		for i := range entries {
			e := &entry{race: &firedAt{start: time.Now()}, delay: time.Duration(500+rng.IntN(1000)) * time.Millisecond}
			e.due.race = e.race
			entries[i] = e
			timers.add(&e.due, e.delay)
			if rng.IntN(4) == 0 {
				timers.remove(&e.due) // at once
				e.removed = true
			}
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
		for _, e := range entries { // later, wherever the heap has moved them
			if !e.removed && rng.IntN(3) == 0 {
				timers.remove(&e.due)
				e.removed = true
			}
		}
		time.Sleep(2 * time.Second)
		for i, e := range entries {
			if e.removed {
				assert.Empty(t, e.race.fired(), "race %d was removed", i)
			} else {
				assert.Equal(t, []time.Duration{e.delay}, e.race.fired(), "race %d", i)
			}
		}
		assert.Empty(t, timers.due)
	})
}

// TestHedgeTimersSetAgainForAnEarlierRace: the timer, set for a race due
// late, is set again for one that comes due earlier (a delay that learned
// a lower latency), and for one that comes after the first answered.
func TestHedgeTimersSetAgainForAnEarlierRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timers := testTimers()
		slow, quick, later := &firedAt{start: time.Now()}, &firedAt{start: time.Now()}, &firedAt{}
		slowDue, quickDue, laterDue := hedgeDue{race: slow}, hedgeDue{race: quick}, hedgeDue{race: later}
		timers.add(&slowDue, time.Hour)
		timers.add(&quickDue, 10*time.Millisecond)
		timers.remove(&slowDue) // answered
		time.Sleep(20 * time.Millisecond)
		assert.Equal(t, []time.Duration{10 * time.Millisecond}, quick.fired())
		later.start = time.Now()
		timers.add(&laterDue, 30*time.Millisecond)
		time.Sleep(time.Second)
		assert.Equal(t, []time.Duration{30 * time.Millisecond}, later.fired())
		assert.Empty(t, slow.fired())
	})
}

// TestHedgeTimersRaceAddedAgainFromItsFire: a race's fire may add it
// again (its next hedge), without a deadlock, each delay after the last.
func TestHedgeTimersRaceAddedAgainFromItsFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timers := testTimers()
		r := &again{timers: timers, left: 3, start: time.Now()}
		r.due.race = r
		timers.add(&r.due, 50*time.Millisecond)
		time.Sleep(time.Second)
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}, r.at)
	})
}

type again struct {
	mu     sync.Mutex
	timers *hedgeTimers
	due    hedgeDue
	left   int
	start  time.Time
	at     []time.Duration
}

func (a *again) fire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Since(a.start))
	if a.left--; a.left > 0 {
		a.timers.add(&a.due, 50*time.Millisecond)
	}
}

// testTimers is a hedgeTimers on the clock of the test's bubble, which a
// pipeline's would not use there.
func testTimers() *hedgeTimers {
	start := time.Now()
	return &hedgeTimers{clock: func() monotime.Reading { return monotime.Reading(time.Since(start)) }}
}

// TestHedgeTimersLeaveABubbleToTheRace: in a testing/synctest bubble, the
// pipeline's timer takes no race: each has a timer of its own there.
func TestHedgeTimersLeaveABubbleToTheRace(t *testing.T) {
	var timers hedgeTimers
	var e hedgeDue
	require.True(t, timers.add(&e, time.Hour), "outside a bubble")
	timers.remove(&e)
	synctest.Test(t, func(t *testing.T) {
		assert.False(t, timers.add(&e, time.Hour), "inside one")
	})
}

// TestSlowListenerHoldsUpOnlyItsOwnHedge: outside a bubble, where the
// races of a pipeline share its timer, a listener slow to hear one call's
// hedge does not hold up the other calls' hedges (in real time).
func TestSlowListenerHoldsUpOnlyItsOwnHedge(t *testing.T) {
	var slowOnce atomic.Bool
	slow := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventHedged && slowOnce.CompareAndSwap(false, true) {
			time.Sleep(time.Second)
		}
	})
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))), WithListener(slow))
	const calls = 4
	start := time.Now()
	var wg sync.WaitGroup
	sentAt := make([]time.Duration, calls)
	for i := range calls {
		wg.Go(func() {
			var n atomic.Int32
			_, _ = Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if n.Add(1) == 1 {
					<-ctx.Done() // cut by the hedge that wins
					return 0, ctx.Err()
				}
				sentAt[i] = time.Since(start)
				return 1, nil
			})
		})
	}
	wg.Wait()
	late := 0
	for _, d := range sentAt {
		if d > 500*time.Millisecond {
			late++
		}
	}
	assert.LessOrEqual(t, late, 1, "hedges sent at %v: one call's listener held up another's", sentAt)
}

// TestHedgingThroughABreaker: a pipeline with a breaker and hedging (and
// no tracer) hedges: the call is not sent straight into the breaker past
// the hedging state.
func TestHedgingThroughABreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithBreaker(breaker.New("b")), WithRetry(retrypolicy.New()), WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int32
		res, err := Do(t.Context(), p, func(ctx context.Context) (int32, error) {
			if i := n.Add(1); i > 1 {
				return i, nil // the hedge
			}
			<-ctx.Done() // the first attempt, cut by the hedge that wins
			return 0, ctx.Err()
		})
		require.NoError(t, err)
		assert.Equal(t, int32(2), res, "the hedge answered")
	})
}
