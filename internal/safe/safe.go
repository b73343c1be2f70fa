// Package safe keeps a user's callback from changing the outcome of a call:
// a listener or callback that panics is reported, not let through into the
// breaker's counts or the caller's result, nor to the other listeners.
package safe

import (
	"log/slog"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener passes events to the listeners it was made of, each on its own
// (a panic in one is logged, and the others still hear the event), and
// names the events that lack a name. Its methods are cheap on a nil
// *Listener, which wants nothing; the stages hold one, not an interface,
// so that asking it costs no dynamic call.
type Listener struct {
	ls       []resilience.Listener
	name     string
	filtered bool // some listener is a Filter
}

// New returns a Listener of ls (nil ones skipped) that names unnamed
// events name, or nil if there is no listener. A single *Listener is
// returned as it is if it has that name or name is empty.
func New(name string, ls ...resilience.Listener) *Listener {
	s := &Listener{name: name}
	for _, l := range ls {
		switch l := l.(type) {
		case nil:
			continue
		case *Listener:
			if l == nil {
				continue // a stage's listener not set yet
			}
			s.filtered = s.filtered || l.filtered
		case resilience.Filter:
			s.filtered = true
		}
		s.ls = append(s.ls, l)
	}
	switch {
	case len(s.ls) == 0:
		return nil
	case len(s.ls) == 1:
		if one, ok := s.ls[0].(*Listener); ok && (name == "" || one.name == name) {
			return one
		}
	}
	return s
}

// OnEvent passes e, named, to every listener that wants it.
func (s *Listener) OnEvent(e resilience.Event) {
	if e.Name == "" {
		e.Name = s.name
	}
	for _, l := range s.ls {
		if !s.filtered || wants(l, e.Kind) {
			deliver(l, e)
		}
	}
}

func deliver(l resilience.Listener, e resilience.Event) {
	defer recoverEvent("listener", e.Kind)
	l.OnEvent(e)
}

// Wants reports whether any listener wants events of kind k; a panic in a
// listener's Wants counts as no.
func (s *Listener) Wants(k resilience.EventKind) bool {
	if s == nil {
		return false
	}
	if !s.filtered {
		return true
	}
	for _, l := range s.ls {
		if wants(l, k) {
			return true
		}
	}
	return false
}

func wants(l resilience.Listener, k resilience.EventKind) (yes bool) {
	defer recoverEvent("listener's Wants", k)
	return resilience.Wants(l, k)
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
