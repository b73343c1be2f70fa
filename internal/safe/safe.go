// Package safe keeps a user's callback from changing the outcome of a call:
// a listener or state-change function that panics is reported, not let
// through into the breaker's counts or the caller's result.
package safe

import (
	"log/slog"
	"slices"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener passes events to the listeners it was made of, recovering their
// panics, and names the events that lack a name. Its methods are cheap on
// a nil *Listener, which wants nothing; the stages hold one, not an
// interface, so that asking it costs no dynamic call.
type Listener struct {
	l      resilience.Listener
	name   string
	filter resilience.Filter // nil: every event is wanted
}

// New returns a Listener of ls (nil ones skipped) that names unnamed
// events name, or nil if there is no listener. A single *Listener is
// returned as it is if it has that name or name is empty.
func New(name string, ls ...resilience.Listener) *Listener {
	ls = slices.DeleteFunc(slices.Clone(ls), func(l resilience.Listener) bool {
		s, ok := l.(*Listener)
		return ok && s == nil // a stage's listener not set yet
	})
	l := resilience.Listeners(ls...)
	if l == nil {
		return nil
	}
	if s, ok := l.(*Listener); ok && (name == "" || s.name == name) {
		return s
	}
	s := &Listener{l: l, name: name}
	for _, each := range ls {
		if filters(each) {
			s.filter = l.(resilience.Filter) // what Listeners returns for several
			break
		}
	}
	return s
}

// filters reports whether l may not want every event.
func filters(l resilience.Listener) bool {
	if s, ok := l.(*Listener); ok {
		return s.filter != nil
	}
	_, ok := l.(resilience.Filter)
	return ok
}

// OnEvent passes e on, named.
func (s *Listener) OnEvent(e resilience.Event) {
	if e.Name == "" {
		e.Name = s.name
	}
	defer recoverEvent("listener", e.Kind)
	s.l.OnEvent(e)
}

// Wants reports whether any listener wants events of kind k; a panic in a
// listener's Wants counts as no.
func (s *Listener) Wants(k resilience.EventKind) (yes bool) {
	if s == nil {
		return false
	}
	if s.filter == nil {
		return true
	}
	defer recoverEvent("listener's Wants", k)
	return s.filter.Wants(k)
}

// Emit passes e on if s wants it; a nil s does nothing.
func (s *Listener) Emit(e resilience.Event) {
	if s.Wants(e.Kind) {
		s.OnEvent(e)
	}
}

// Call calls fn, logging and stopping a panic; what names fn in the log.
func Call(what string, fn func()) {
	defer recoverEvent(what, 0)
	fn()
}

// recoverEvent logs a recovered panic with slog's default logger: the one
// place such a panic can go without changing the call it happened in. It
// takes the kind, not its name, so that a call without a panic pays for no
// string.
func recoverEvent(what string, k resilience.EventKind) {
	if r := recover(); r != nil {
		slog.Error("resiliencekit: a "+what+" panicked; the call goes on as if it had not", "event", k.String(), "panic", r)
	}
}
