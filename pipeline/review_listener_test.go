package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// toggled is a Filter whose answer can change at any time (a log level,
// a sampling switch); it records events it got while saying no.
type toggled struct {
	on       atomic.Bool
	unwanted atomic.Int32
	got      atomic.Int32
	kinds    []string
}

func (f *toggled) Wants(resilience.EventKind) bool { return f.on.Load() }
func (f *toggled) OnEvent(e resilience.Event) {
	f.got.Add(1)
	if !f.on.Load() {
		f.unwanted.Add(1)
		f.kinds = append(f.kinds, e.Kind.String())
	}
}

// TestFilterAnswerHoldsForTheCall: a Filter is asked once a call whether
// it wants a kind of event (resilience.Filter's contract), and its answer
// holds for that call, with one listener or two; switched off during a
// call, it hears no event of the next.
func TestFilterAnswerHoldsForTheCall(t *testing.T) {
	for _, second := range []bool{false, true} {
		f := &toggled{}
		f.on.Store(true)
		opts := []Option{WithListener(f), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond)))}
		if second {
			opts = append(opts, WithListener(resilience.ListenerFunc(func(resilience.Event) {})))
		}
		p := New(opts...)
		n := 0
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n == 1 {
				f.on.Store(false) // switched off while the call runs
			}
			return 0, errors.New("fail")
		})
		got := f.got.Load()
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("fail") })
		if f.got.Load() != got {
			t.Errorf("second listener %v: the next call's events reached a Filter that said no", second)
		}
	}
}
