package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r3Rec records events.
type r3Rec struct {
	mu     sync.Mutex
	events []resilience.Event
}

func (r *r3Rec) OnEvent(e resilience.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *r3Rec) kinds(k resilience.EventKind) []resilience.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []resilience.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// r3PanicDone is a Filter whose Wants panics for EventCallDone only; it
// wants every other kind.
type r3PanicDone struct{ r3Rec }

func (*r3PanicDone) Wants(k resilience.EventKind) bool {
	if k == resilience.EventCallDone {
		panic("r3: Wants(EventCallDone) broken")
	}
	return true
}

var r3Transient = errors.New("r3: transient")

func r3Quiet(t *testing.T) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// A listener whose Wants panics for one kind (EventCallDone) must still
// hear the kinds it answers for: "a panic in Wants counts as no" for that
// kind. Asking Wants(EventCallDone) and Wants(EventAttempt) under one guard
// loses EventAttempt too.
func TestReview3PanicInWantsCallDoneLosesAttempts(t *testing.T) {
	r3Quiet(t)
	for _, retry := range []bool{true, false} {
		l := &r3PanicDone{}
		opts := []Option{WithListener(l)}
		if retry {
			opts = append(opts, WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))
		}
		p := New(opts...)
		n := 0
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
			n++
			if n < 3 && retry {
				return 0, r3Transient
			}
			return 1, nil
		})
		want := 1
		if retry {
			want = 3
		}
		if got := len(l.kinds(resilience.EventAttempt)); got != want {
			t.Errorf("retry=%v: %d EventAttempt, want %d (a panic in Wants(EventCallDone) must not cost the listener its attempts)", retry, got, want)
		}
	}
}

var _ = time.Second

// r3Timer wants every kind, but its Wants of EventAttempt panics; it times
// no call (TimeCall says no).
type r3Timer struct {
	r3Rec
	asked int
}

func (*r3Timer) Wants(k resilience.EventKind) bool {
	if k == resilience.EventAttempt {
		panic("r3: Wants(EventAttempt) broken")
	}
	return true
}

func (t *r3Timer) TimeCall() bool { t.asked++; return false }

// A panic in Wants(EventAttempt) counts as no for attempts; it must not
// change how the call is timed: the CallTimer is still asked, and a call it
// declined comes Untimed, with no clock read. Under callWanted's one guard,
// the panic skips TimeCall and has the call timed (timed = done).
func TestReview3PanicInWantsAttemptTimesCall(t *testing.T) {
	r3Quiet(t)
	l := &r3Timer{}
	p := New(WithListener(l))
	_, _ = Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	done := l.kinds(resilience.EventCallDone)
	if len(done) != 1 {
		t.Fatalf("%d EventCallDone", len(done))
	}
	if l.asked != 1 || !done[0].Untimed {
		t.Errorf("TimeCall asked %d times, EventCallDone Untimed=%v; want TimeCall asked once and the call untimed", l.asked, done[0].Untimed)
	}
}
