package pipeline

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// monotime's base, the reading every deadline's time.Time is made from.
//
//go:linkname r3MonotimeBase github.com/resiliencekit/resiliencekit/internal/monotime.base
var r3MonotimeBase time.Time

// r3StepWall makes the process look as if the wall clock had been stepped
// by -step since monotime's base was read (NTP correcting a clock that was
// step fast at boot, or, for a negative step, a machine that slept: the
// monotonic clock does not count a suspend, the wall clock does). The
// monotonic reading of base is kept; only its wall reading moves.
//
// It writes base, which every goroutine of the package reads: it runs the
// test again in a process of its own, with no goroutine of an earlier test
// left (a hedge still running, say) whose read would race with the write,
// and reports false in this one, where the test is then over; true in
// that process, where base stays stepped to its end.
func r3StepWall(t *testing.T, step time.Duration) bool {
	t.Helper()
	if os.Getenv("R3_WALLSTEP") != t.Name() {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "R3_WALLSTEP="+t.Name())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v in the test's own process:\n%s", err, out)
		}
		return false
	}
	old := r3MonotimeBase
	type rawTime struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	raw := (*rawTime)(unsafe.Pointer(&r3MonotimeBase))
	const hasMonotonic = 1 << 63
	if raw.wall&hasMonotonic == 0 {
		t.Skip("base has no monotonic reading")
	}
	secs := int64(step / time.Second)
	raw.wall += uint64(secs) << 30 // wall seconds since 1885 sit above 30 bits of nanoseconds
	if got := r3MonotimeBase.Round(0).Sub(old.Round(0)); got != step {
		t.Fatalf("stepped base by %v, want %v", got, step)
	}
	return true
}

// A caller's deadline without a monotonic reading (time.Unix, a deadline
// read from a header or a message, Round(0)) is compared with the budget's
// on the wall clock. The budget's deadline carries the wall reading of the
// process's first clock read plus the monotonic time since, not the wall
// clock's: once the wall clock has been stepped (or the machine slept), a
// budget is wrongly judged to come after the caller's deadline and is not
// set at all. time.Now().Add(budget), as before the change, is right.
func TestReview3BudgetIgnoredAfterWallStep(t *testing.T) {
	if !r3StepWall(t, time.Hour) { // the process's first wall reading was an hour fast
		return
	}
	p := New(WithTimeBudget(100 * time.Millisecond))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(10*time.Second).Round(0))
	defer cancel()
	start := time.Now()
	var left time.Duration
	_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
		if d, ok := ctx.Deadline(); ok {
			left = time.Until(d)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Second):
			return 1, nil
		}
	})
	took := time.Since(start)
	if left > time.Second || took > time.Second || err == nil {
		t.Errorf("budget 100ms, caller's deadline 10s: the operation saw %v left, the call took %v (err %v); want the 100ms budget", left, took, err)
	}
}

// The other way: the caller's (wall-only) deadline is the sooner, yet the
// budget context reports its own, later one, which deadline.Inject and
// any client then pass on.
func TestReview3DeadlineLaterThanCallersAfterWallStep(t *testing.T) {
	if !r3StepWall(t, -time.Hour) { // the machine slept an hour since the process started
		return
	}
	p := New(WithTimeBudget(10 * time.Second))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(200*time.Millisecond).Round(0))
	defer cancel()
	var left time.Duration
	_, _ = Do(ctx, p, func(ctx context.Context) (int, error) {
		d, _ := ctx.Deadline()
		left = time.Until(d)
		return 1, nil
	})
	if left > time.Second {
		t.Errorf("caller's deadline 200ms, budget 10s: the operation's ctx.Deadline() is %v away; want the caller's 200ms", left)
	}
}

// No caller deadline at all: the breaker compares the budget's deadline
// with its next probe, a wall clock time (time.Unix(0, openedAt) plus the
// open timeout). Once the wall clock has moved against the monotonic one
// since the process started (a machine that slept an hour), a budget of 5 s
// looks to end an hour ago, and WaitWhenOpen refuses to wait for a probe
// 200 ms away: the call fails at once with the rejection.
func TestReview3WaitWhenOpenRefusesAfterWallStep(t *testing.T) {
	if !r3StepWall(t, -time.Hour) {
		return
	}
	b := breaker.New("r3-wallwait", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(200*time.Millisecond))
	_ = b.Execute(context.Background(), func(context.Context) error { return r3Transient })
	p := New(WithBreaker(b), WaitWhenOpen(), WithTimeBudget(5*time.Second))
	start := time.Now()
	_, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("after %v: %v; want the call to wait ~200ms for the probe and succeed", time.Since(start), err)
	}
}
