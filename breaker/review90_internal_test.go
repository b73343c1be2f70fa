package breaker

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// With Window(0) (documented: counts kept until the state changes) and
// FailureRate, a long closed spell piles up successes in uint32 counts.
// Once TotalSuccesses+TotalFailures wraps past 2^32, the rate rule sees a
// tiny "done" and trips on a failure share of ~1e-9.
func TestReview90CountsOverflowTripsRate(t *testing.T) {
	b := New("ovf", Window(0, 1), ConsecutiveFailures(0), FailureRate(0.5, 10))
	ctx := context.Background()
	// Simulate ~4.29e9 successes already counted in this closed spell.
	b.cb.mu.Lock()
	b.cb.win.TotalSuccesses = math.MaxUint32 - 20
	b.cb.win.Requests = math.MaxUint32 - 20
	b.cb.win.ConsecutiveSuccesses = math.MaxUint32 - 20
	b.cb.buckets[0] = b.cb.win
	b.cb.mu.Unlock()
	fail := errors.New("transient")
	// 30 failures among ~4.29e9 calls: a failure share of 7e-9.
	for i := 0; i < 30; i++ {
		_ = b.Execute(ctx, func(context.Context) error { return fail })
		// one success between failures so ConsecutiveFailures can't matter
		_ = b.Execute(ctx, func(context.Context) error { return nil })
	}
	if st := b.State(); st.String() != "closed" {
		t.Fatalf("breaker %v after 30 failures in ~4.29e9 calls (rate 0.5): counts %+v", st, b.Counts())
	}
}

// A closed window that reaches halveAt calls halves its counts, every
// bucket's, and keeps their shares and the run of failures.
func TestHalvingKeepsTheShares(t *testing.T) {
	b := New("halve", Window(time.Minute, 6), ConsecutiveFailures(5), FailureRate(0.5, 10))
	b.cb.mu.Lock()
	per := Counts{Requests: halveAt / 6, TotalSuccesses: halveAt / 6 * 3 / 4, TotalFailures: halveAt / 6 / 4, ConsecutiveFailures: 3}
	for i := range b.cb.buckets {
		b.cb.buckets[i] = per
		b.cb.win.Requests += per.Requests
		b.cb.win.TotalSuccesses += per.TotalSuccesses
		b.cb.win.TotalFailures += per.TotalFailures
	}
	b.cb.win.Requests = halveAt // rounding of the sixths
	b.cb.win.ConsecutiveFailures = 3
	b.cb.mu.Unlock()
	before := b.Snapshot().FailureRate
	_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
	n := b.Counts()
	require.Less(t, n.Requests, uint32(halveAt/2+10))
	assert.InDelta(t, before, b.Snapshot().FailureRate, 1e-6)
	assert.Equal(t, uint32(4), n.ConsecutiveFailures, "the run of failures goes on")
	assert.Equal(t, resilience.StateClosed, b.State())
}
