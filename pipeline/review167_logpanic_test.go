package pipeline_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r167Handler is a slog handler that panics, or calls runtime.Goexit,
// on every record.
type r167Handler struct{ goexit bool }

func (h r167Handler) Enabled(context.Context, slog.Level) bool { return true }
func (h r167Handler) Handle(context.Context, slog.Record) error {
	if h.goexit {
		runtime.Goexit()
	}
	panic("the default logger's handler panics")
}
func (h r167Handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h r167Handler) WithGroup(string) slog.Handler      { return h }

func r167WithLogger(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// r167Hedged runs one hedged call: the first attempt takes 100 ms, the
// hedges (sent every 10 ms, 3 at most) 50, 200 and 300 ms; every
// attempt's result goes to a Discard function that panics; a listener
// panics at every event. It reports whether Do returned on the caller's
// goroutine and how many losers' results were given to Discard.
func r167Hedged(t *testing.T, panickingListener bool) (returned bool, discarded int32, val int) {
	return r167HedgedWith(t, panickingListener, true)
}

func r167HedgedWith(t *testing.T, panickingListener, panickingDiscard bool) (returned bool, discarded int32, val int) {
	var n, disc atomic.Int32
	opts := []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3)))}
	if panickingListener {
		opts = append(opts, pipeline.WithListener(resilience.ListenerFunc(func(resilience.Event) { panic("listener") })))
	}
	p := pipeline.New(opts...)
	took := []time.Duration{100 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			i := int(n.Add(1)) - 1
			select {
			case <-time.After(took[min(i, 3)]):
				return i + 1, nil
			case <-ctx.Done():
				return -(i + 1), ctx.Err()
			}
		}, pipeline.Discard(func(int) {
			disc.Add(1)
			if panickingDiscard {
				panic("discard")
			}
		}))
		if err == nil {
			val = v
		}
		returned = true
	}()
	<-done
	time.Sleep(time.Second) // the losers end, and are disposed of
	synctest.Wait()
	return returned, disc.Load(), val
}

// Promise (internal/safe.LogPanic, CHANGELOG review164): a listener's or
// Discard function's panic is logged; a default logger that panics too
// has its panic dropped, and the call goes on; every loser's result is
// given to Discard (pipeline.Discard: "fn is called once for each").
func TestReview167PanickingLoggerHedgedCall(t *testing.T) {
	var want int32
	synctest.Test(t, func(t *testing.T) { _, want, _ = r167HedgedWith(t, false, false) })
	r167WithLogger(t, r167Handler{})
	synctest.Test(t, func(t *testing.T) {
		returned, disc, v := r167Hedged(t, true)
		if !returned || v != 2 {
			t.Fatalf("Do returned %v with %d; want the 50 ms hedge's 2", returned, v)
		}
		if disc != want {
			t.Errorf("Discard called %d times, want %d (the losers, as without panics)", disc, want)
		}
	})
}

// The same with a default logger whose handler calls runtime.Goexit,
// and only the Discard function panicking (on the caller's goroutine or
// the pipeline's). Where the log runs on the pipeline's own goroutines,
// it must not stop the other losers' disposal; and the caller's Do must
// still return (Discard's panic is not the caller's).
func TestReview167GoexitLoggerHedgedCall(t *testing.T) {
	var want int32
	synctest.Test(t, func(t *testing.T) { _, want, _ = r167HedgedWith(t, false, false) })
	r167WithLogger(t, r167Handler{goexit: true})
	synctest.Test(t, func(t *testing.T) {
		returned, disc, v := r167Hedged(t, false)
		if !returned {
			t.Errorf("Do never returned: the logger's Goexit ended the caller's goroutine")
		} else if v != 2 {
			t.Errorf("Do returned %d; want the 50 ms hedge's 2", v)
		}
		if disc != want {
			t.Errorf("Discard called %d times, want %d (the losers, as without panics)", disc, want)
		}
	})
}
