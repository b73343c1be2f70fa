// Package safe keeps a user's callback from changing the outcome of a call:
// a listener or state-change function that panics is reported, not let
// through into the breaker's counts or the caller's result.
package safe

import (
	"log/slog"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// listener recovers the panics of the Listener it wraps.
type listener struct{ l resilience.Listener }

func (s listener) OnEvent(e resilience.Event) {
	defer recoverAs("listener", e.Kind.String())
	s.l.OnEvent(e)
}

// Wants asks the wrapped listener, recovering its panic as a no.
func (s listener) Wants(k resilience.EventKind) (yes bool) {
	defer recoverAs("listener's Wants", k.String())
	return resilience.Wants(s.l, k)
}

// Listener returns l wrapped so that a panic in OnEvent is logged and
// goes no further; nil for a nil l. Wrapping twice is a no-op.
func Listener(l resilience.Listener) resilience.Listener {
	switch l.(type) {
	case nil:
		return nil
	case listener:
		return l
	}
	return listener{l}
}

// Call calls fn, logging and stopping a panic; what names fn in the log.
func Call(what string, fn func()) {
	defer recoverAs(what, "")
	fn()
}

// recoverAs logs a recovered panic with slog's default logger: the one
// place such a panic can go without changing the call it happened in.
func recoverAs(what, event string) {
	if r := recover(); r != nil {
		slog.Error("resiliencekit: a "+what+" panicked; the call goes on as if it had not", "event", event, "panic", r)
	}
}
