// Package slogevents logs the events of resiliencekit's stages with
// log/slog.
package slogevents

import (
	"context"
	"log/slog"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener logs events to a *slog.Logger: a breaker opening and calls
// giving up at Warn, other state changes at Info, attempts, retries,
// rejections and finished calls at Debug. It is safe for concurrent use.
type Listener struct {
	log *slog.Logger
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
	level := slog.LevelDebug
	switch e.Kind {
	case resilience.EventStateChange:
		level = slog.LevelInfo
		if e.To == resilience.StateOpen {
			level = slog.LevelWarn
		}
	case resilience.EventRetriesExhausted, resilience.EventQuotaExhausted,
		resilience.EventTimeBudgetExceeded, resilience.EventSharedStateUnavailable:
		level = slog.LevelWarn
	case resilience.EventSharedStateRestored:
		level = slog.LevelInfo
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
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
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	l.log.LogAttrs(ctx, level, "resilience "+e.Kind.String(), attrs...)
}
