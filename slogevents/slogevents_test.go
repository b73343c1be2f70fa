package slogevents_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

func TestLevelsAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // drop the time for a stable output
			}
			return a
		},
	}))
	l := slogevents.New(logger)
	l.OnEvent(resilience.Event{Kind: resilience.EventRetry, Name: "db", Attempt: 1, Delay: time.Second})
	l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: "db", From: resilience.StateClosed, To: resilience.StateOpen})
	l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "db", Attempt: 4, Err: errors.New("reset")})
	assert.Equal(t, "level=WARN msg=\"resilience state_change\" dependency=db from=closed to=open\n"+
		"level=WARN msg=\"resilience retries_exhausted\" dependency=db attempt=4 error=reset\n", buf.String())
}

func TestWantsOnlyWhatTheLoggerLogs(t *testing.T) {
	info := slogevents.New(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))
	assert.False(t, info.Wants(resilience.EventCallDone), "call durations are logged at Debug")
	assert.False(t, info.Wants(resilience.EventAttempt))
	assert.True(t, info.Wants(resilience.EventStateChange))
	assert.True(t, info.Wants(resilience.EventRetriesExhausted))
	debug := slogevents.New(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))
	assert.True(t, debug.Wants(resilience.EventCallDone))
}

func TestZeroListenerLogsToTheDefault(t *testing.T) {
	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	var l slogevents.Listener
	l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "db"})
	assert.Contains(t, buf.String(), "retries_exhausted")
}

func TestWarnLoggerHearsTheBreakerOpen(t *testing.T) {
	var buf bytes.Buffer
	l := slogevents.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	b := breaker.New("db", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) })
	assert.Equal(t, resilience.StateOpen, b.State())
	assert.Contains(t, buf.String(), "to=open")
}
