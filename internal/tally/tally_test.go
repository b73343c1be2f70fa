package tally_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type keeper struct{ tally.Counts }

func (*keeper) OnEvent(resilience.Event)        {}
func (*keeper) Wants(resilience.EventKind) bool { return false }

func TestAttemptsAreCountedByKind(t *testing.T) {
	var c tally.Counts
	err := errors.New("down")
	c.Attempt(1, nil)
	c.Attempt(1, nil)
	c.Attempt(1, err)
	c.Attempt(2, nil)
	c.Attempt(3, err)
	c.Attempt(2, err)
	c.Attempt(1, resilience.Rejected(err))
	c.Attempt(2, resilience.Rejected(err))
	c.Attempt(3, resilience.Rejected(err))
	c.Attempt(1, context.Canceled)
	c.Attempt(2, fmt.Errorf("gone: %w", context.Canceled))
	c.Attempt(2, context.Canceled)
	assert.True(t, c.Call())
	calls, f, l := c.Load()
	assert.Equal(t, uint64(1), calls)
	assert.Equal(t, tally.Outcomes{OK: 2, Failed: 1, Refused: 1, Canceled: 1}, f, "a refused or canceled attempt is neither a success nor a failure")
	assert.Equal(t, tally.Outcomes{OK: 1, Failed: 2, Refused: 2, Canceled: 2}, l)
}

func TestAboutOneCallInSampleEveryIsTimed(t *testing.T) {
	var c tally.Counts
	assert.True(t, c.Call(), "the first call")
	timed := 0
	const calls = 1000 * tally.SampleEvery
	gap, maxGap := 0, 0
	for range calls {
		gap++
		if c.Call() {
			timed++
			maxGap, gap = max(maxGap, gap), 0
		}
	}
	assert.InDelta(t, calls/tally.SampleEvery, timed, calls/tally.SampleEvery/10)
	assert.Less(t, maxGap, 2*tally.SampleEvery)
}

// Calls that start together once a call is to be timed: exactly one is
// timed, chosen as it starts.
func TestOneCallClaimsTheSample(t *testing.T) {
	// One call in SampleEvery on average is timed, however many start at
	// once: a sample is claimed by one call only.
	const goroutines, each = 8, 8000
	var c tally.Counts
	var timed atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				if c.Call() {
					timed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	want := int64(goroutines * each / tally.SampleEvery)
	assert.InDelta(t, want, timed.Load(), float64(want)/10, "calls timed of %d", goroutines*each)
}

func TestOfFindsAKeeper(t *testing.T) {
	k := &keeper{}
	got, c := tally.Of(k)
	assert.Equal(t, tally.Keeper(k), got)
	assert.Same(t, &k.Counts, c)
	got, c = tally.Of(resilience.ListenerFunc(func(resilience.Event) {}))
	assert.Nil(t, got)
	assert.Nil(t, c)
	got, c = tally.Of(nil)
	assert.Nil(t, got)
	assert.Nil(t, c)
}
