package pipeline_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestReview21DiscardPanicOnAbandonGoroutine, from a review: a hedged
// call's Discard function is called "possibly on another goroutine and
// after the call has returned". The pipeline guards every other piece of
// the caller's code it calls: a listener's or a tracer's panic is logged
// and changes nothing; an operation's panic goes on in the caller. A
// panic in Discard, called for the loser of a race on abandon's goroutine
// after the call returned, is on no caller's stack: it kills the process.
// The scenario runs in a child process, which must survive it.
func TestReview21DiscardPanicOnAbandonGoroutine(t *testing.T) {
	if os.Getenv("REVIEW21_DISCARD_CHILD") != "" {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5 * time.Millisecond))))
		var n atomic.Int32
		res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			if n.Add(1) == 1 { // the first attempt wins at 20 ms; the hedge, sent at 5 ms, loses
				time.Sleep(20 * time.Millisecond)
				return "winner", nil
			}
			<-ctx.Done()
			return "loser", ctx.Err()
		}, pipeline.Discard(func(s string) { panic("discard of " + s) }))
		if err != nil || res != "winner" {
			os.Exit(3)
		}
		time.Sleep(200 * time.Millisecond) // the loser is disposed of meanwhile
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview21DiscardPanicOnAbandonGoroutine$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REVIEW21_DISCARD_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("child: %v\n%s", err, firstLines(string(out), 12))
	}
	assert.NoError(t, err, "a panic in Discard for a loser killed the process after the call had returned")
}

func firstLines(s string, n int) string {
	for i, c := range s {
		if c == '\n' {
			if n--; n == 0 {
				return s[:i]
			}
		}
	}
	return s
}

// TestReview21DiscardPanicInCallerLeavesTheRaceRunning, from a review: a
// panic in Discard on the caller's goroutine (disposing of the first
// attempt's failure as a hedge wins) goes on in the caller, but the race
// is left as it was: not stopped, its hedges not canceled. The pipeline's
// timer goes on sending hedges after the call is over, and a hedge that
// honours its context waits for ever. Do's doc: if op panics "every
// context the call made is canceled".
func TestReview21DiscardPanicInCallerLeavesTheRaceRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	var n, after atomic.Int32
	var returned atomic.Bool
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(6), hedge.MaxShare(1))))
	for range 20 { // calls in the window, for MaxShare's budget
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	func() {
		defer func() { _ = recover(); returned.Store(true) }()
		_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			if returned.Load() {
				after.Add(1)
			}
			switch n.Add(1) {
			case 1: // the first attempt fails at 12 ms, once a hedge is out
				time.Sleep(12 * time.Millisecond)
				return 0, errors.New("503")
			case 2: // hedge 1 wins at about 15 ms
				time.Sleep(10 * time.Millisecond)
				return 1, nil
			}
			<-ctx.Done() // the others wait for their cancellation
			return 0, ctx.Err()
		}, pipeline.Discard(func(int) { panic("discard") }))
	}()
	require.True(t, returned.Load())
	time.Sleep(100 * time.Millisecond)
	t.Logf("%d attempts in all, %d started after the call had panicked out", n.Load(), after.Load())
	assert.Zero(t, after.Load(), "hedges sent after the call was over")
	// The hedges still out hold their goroutines until the caller's own
	// context ends: with context.Background, for ever.
	assert.NoError(t, goleak.Find(before), "goroutines of the call left running after it panicked out")
	cancel()
}
