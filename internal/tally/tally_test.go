package tally_test

import (
	"errors"
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
	fo, ff, lo, lf := c.Load()
	assert.Equal(t, [4]uint64{2, 1, 1, 2}, [4]uint64{fo, ff, lo, lf})
}

func TestOneAttemptInSampleEveryAsksForATimedCall(t *testing.T) {
	var c tally.Counts
	for range tally.SampleEvery - 1 {
		c.Attempt(1, nil)
	}
	assert.False(t, c.TimeNext())
	c.Attempt(1, nil)
	assert.True(t, c.TimeNext())
	c.Timed()
	assert.False(t, c.TimeNext())
	for range tally.SampleEvery {
		c.Attempt(2, errors.New("down"))
	}
	assert.True(t, c.TimeNext(), "each kind of attempt")
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
