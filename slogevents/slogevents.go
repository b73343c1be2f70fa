// Package slogevents logs the events of resiliencekit's stages with
// log/slog.
package slogevents

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener logs events to a *slog.Logger: a breaker opening and calls
// giving up at Warn (their retries, the quota or the time budget spent;
// a store failing), other state changes, and a failed call that was not
// to be retried (resilience.EventNotRetried), at Info; attempts, retries,
// rejections and finished calls at Debug. It wants ([resilience.Filter])
// only the events its logger is enabled for, so that a pipeline skips the
// rest, and the clock reads of call durations when Debug is off. It is
// safe for concurrent use; the zero Listener, and a nil *Listener, log to
// slog.Default().
type Listener struct {
	log *slog.Logger
}

func (l *Listener) logger() *slog.Logger {
	if l == nil || l.log == nil {
		return slog.Default()
	}
	return l.log
}

// level returns the level at which events of kind k are logged.
func level(e resilience.Event) slog.Level {
	switch e.Kind {
	case resilience.EventStateChange:
		if e.To == resilience.StateOpen {
			return slog.LevelWarn
		}
		return slog.LevelInfo
	case resilience.EventRetriesExhausted, resilience.EventQuotaExhausted,
		resilience.EventTimeBudgetExceeded, resilience.EventSharedStateUnavailable,
		resilience.EventStoreFailed, resilience.EventLeaseLost, resilience.EventNotStored:
		return slog.LevelWarn
	case resilience.EventSharedStateRestored, resilience.EventNotRetried:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// Wants reports whether the logger is enabled for events of kind k at
// the highest level they can have (a state change: Warn, for an opening).
func (l *Listener) Wants(k resilience.EventKind) bool {
	return l.logger().Enabled(context.Background(), level(resilience.Event{Kind: k, To: resilience.StateOpen}))
}

// New returns a Listener logging to l (slog.Default() if nil).
func New(l *slog.Logger) *Listener {
	if l == nil {
		l = slog.Default()
	}
	return &Listener{log: l}
}

// OnEvent logs e.
func (l *Listener) OnEvent(e resilience.Event) {
	level := level(e)
	ctx := context.Background()
	log := l.logger()
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("dependency", e.Name)}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Delay > 0 {
		attrs = append(attrs, slog.Duration("delay", e.Delay))
	}
	if e.Kind == resilience.EventCallDone {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Kind == resilience.EventStateChange {
		attrs = append(attrs, slog.String("from", e.From.String()), slog.String("to", e.To.String()))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", errorText(e.Err)))
	}
	log.LogAttrs(ctx, level, "resilience "+e.Kind.String(), attrs...)
}

// errorText is err.Error(), or, if that panics (a nil pointer of a type
// whose Error does not expect one), what slog's handlers write for a
// value whose method panicked: the event is logged all the same.
func errorText(err error) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = "!PANIC: " + panicText(r)
		}
	}()
	return err.Error()
}

// panicText is v printed, or its type if printing it panics too (an error
// whose Error panics with itself).
func panicText(v any) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("%T", v)
		}
	}()
	return fmt.Sprint(v)
}
