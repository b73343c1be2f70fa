package pipeline

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A pipeline made outside a synctest bubble (a package-level pipeline, a
// TestMain's) and used inside one: the old per-race time.AfterFunc was
// made in the call's bubble and fired on its fake clock. The one shared
// timer is made on first use and is not the bubble's: the hedge due after
// 10ms of the bubble's time never goes out.
func TestEdges28HedgeSharedPipelineIntoBubble(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	// First use outside any bubble: the timer is a real one.
	if _, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var attempts atomic.Int32
		res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if attempts.Add(1) == 1 {
				time.Sleep(time.Second) // slow first attempt, on the bubble's clock
				return 0, errors.New("slow and failed")
			}
			return 2, nil // the hedge
		})
		if err != nil || res != 2 || attempts.Load() != 2 {
			t.Errorf("got %d, %v after %d attempts; want the hedge's 2, sent after 10ms of the bubble's time", res, err, attempts.Load())
		}
	})
}

// One pipeline used in two bubbles, one after the other (a package-level
// pipeline used by two synctest tests). The first bubble's call answered
// before its hedge was due: the shared timer is left set, in the first
// bubble, whose clock never runs again. The second bubble's race is due at
// the same fake instant, so the timer is not reset: its hedge never goes
// out.
func TestEdges28HedgeSharedPipelineTwoBubbles(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	synctest.Test(t, func(t *testing.T) {
		if _, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var attempts atomic.Int32
		res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if attempts.Add(1) == 1 {
				time.Sleep(time.Second)
				return 0, errors.New("slow and failed")
			}
			return 2, nil
		})
		if err != nil || res != 2 || attempts.Load() != 2 {
			t.Errorf("second bubble: got %d, %v after %d attempts; want the hedge's 2", res, err, attempts.Load())
		}
	})
}

// A pipeline first used inside a bubble, whose hedge timer fired there,
// then used outside it: hedgeTimers.reset calls Reset on a timer of the
// bubble from outside it, which the runtime answers with a fatal error
// ("reset of synctest timer from outside bubble"): the whole test binary
// dies. Run in a child process.
func TestEdges28HedgeBubbleThenOutside(t *testing.T) {
	if os.Getenv("EDGES28_CHILD") == "1" {
		p := New(WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
		synctest.Test(t, func(t *testing.T) {
			Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			time.Sleep(time.Second) // the left-set timer fires, for nothing
		})
		var attempts atomic.Int32
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if attempts.Add(1) == 1 {
				time.Sleep(30 * time.Millisecond)
			}
			return 1, nil
		})
		os.Stdout.WriteString("CHILD-OK\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEdges28HedgeBubbleThenOutside$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGES28_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") {
		t.Errorf("a pipeline used in a bubble and then outside it: child failed (%v):\n%s", err, firstLines(string(out), 8))
	}
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

// A listener that takes its time over EventHedged (it may: it holds up
// "the call") now holds up every other race due in the same expiry of
// the pipeline's one timer: their hedges are fired one after the other
// on that timer's goroutine. Before, each race had a timer of its own.
func TestEdges28HedgeSlowListenerDelaysOtherCallsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slowOnce atomic.Bool
		slow := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged && slowOnce.CompareAndSwap(false, true) {
				time.Sleep(time.Second) // a slow exporter, on one call's hedge: that call's to wait for
			}
		})
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))), WithListener(slow))
		const calls = 3
		var sentAt [calls]atomic.Int64
		start := time.Now()
		done := make(chan struct{}, calls)
		for i := range calls {
			go func() {
				var n atomic.Int32
				Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						<-ctx.Done() // the first attempt waits to be cut by the hedge that wins
						return 0, ctx.Err()
					}
					sentAt[i].Store(int64(time.Since(start)))
					return 1, nil
				})
				done <- struct{}{}
			}()
		}
		for range calls {
			<-done
		}
		time.Sleep(10 * time.Second) // the slow listener's calls end
		late := 0
		for i := range calls {
			if d := time.Duration(sentAt[i].Load()); d > 100*time.Millisecond {
				late++
			}
		}
		if late > 1 {
			t.Errorf("%d hedges sent late, not ~10ms: one call's listener held up another's", late)
		}
	})
}
