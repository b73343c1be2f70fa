package slogevents_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

// New(nil) is documented as logging to slog.Default(); the zero Listener
// too. Both should follow the default logger the program sets, as the
// zero Listener does: New(nil) made at init (a package-level var) before
// main sets its logger would otherwise log to the standard logger for
// ever.
func TestReview118NewNilFollowsDefault(t *testing.T) {
	old := slog.Default()
	defer slog.SetDefault(old)
	l := slogevents.New(nil)
	var zero slogevents.Listener
	var buf bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	zero.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "zero"})
	l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "new-nil"})
	if !strings.Contains(buf.String(), "zero") {
		t.Fatalf("zero Listener did not log to the new default: %q", buf.String())
	}
	if !strings.Contains(buf.String(), "new-nil") {
		t.Errorf("New(nil) did not log to slog.Default() as set after New: %q", buf.String())
	}
}

// A nil *Listener is an easy mistake (var l *slogevents.Listener); the
// zero Listener logs to the default: does a nil one panic?
func TestReview118NilPointerListener(t *testing.T) {
	var l *slogevents.Listener
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("nil *Listener panics in OnEvent/Wants: %v", r)
		}
	}()
	_ = l.Wants(resilience.EventAttempt)
	l.OnEvent(resilience.Event{Kind: resilience.EventAttempt})
}

// Levels as documented, and Wants agreeing with OnEvent for every kind
// at every handler level.
func TestReview118LevelsAndWants(t *testing.T) {
	want := map[resilience.EventKind]slog.Level{
		resilience.EventAttempt:                slog.LevelDebug,
		resilience.EventRetry:                  slog.LevelDebug,
		resilience.EventRetriesExhausted:       slog.LevelWarn,
		resilience.EventQuotaExhausted:         slog.LevelWarn,
		resilience.EventTimeBudgetExceeded:     slog.LevelWarn,
		resilience.EventRejected:               slog.LevelDebug,
		resilience.EventCallDone:               slog.LevelDebug,
		resilience.EventSharedStateUnavailable: slog.LevelWarn,
		resilience.EventSharedStateRestored:    slog.LevelInfo,
		resilience.EventNotRetried:             slog.LevelInfo,
		resilience.EventStoreFailed:            slog.LevelWarn,
		resilience.EventThrottled:              slog.LevelDebug,
		resilience.EventLimited:                slog.LevelDebug,
		resilience.EventHedged:                 slog.LevelDebug,
		resilience.EventWaitOpen:               slog.LevelDebug,
	}
	for k, lv := range want {
		for _, hl := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
			var buf bytes.Buffer
			l := slogevents.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: hl})))
			l.OnEvent(resilience.Event{Kind: k, Name: "d", Err: errors.New("x")})
			logged := buf.Len() > 0
			if logged != (lv >= hl) {
				t.Errorf("%v at handler level %v: logged=%v, want %v (level %v)", k, hl, logged, lv >= hl, lv)
			}
			if logged && !l.Wants(k) {
				t.Errorf("%v: logged but Wants says no at %v", k, hl)
			}
			if logged && !strings.Contains(buf.String(), "level="+lv.String()) {
				t.Errorf("%v: logged at wrong level: %s", k, buf.String())
			}
		}
	}
	for _, to := range []resilience.State{resilience.StateOpen, resilience.StateHalfOpen, resilience.StateClosed} {
		var buf bytes.Buffer
		l := slogevents.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: "d", From: resilience.StateClosed, To: to})
		lv := "INFO"
		if to == resilience.StateOpen {
			lv = "WARN"
		}
		if !strings.Contains(buf.String(), "level="+lv) || !strings.Contains(buf.String(), "to="+to.String()) {
			t.Errorf("state change to %v: %s", to, buf.String())
		}
	}
}
