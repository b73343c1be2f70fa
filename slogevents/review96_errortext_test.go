package slogevents

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// An error whose Error panics with itself: fmt re-panics while printing
// the panic value, inside errorText's deferred recover.
type review96Self struct{}

func (e review96Self) Error() string { panic(e) }

type review96Nil struct{ s *string }

func (e *review96Nil) Error() string { return *e.s }

type review96PanicNil struct{}

func (review96PanicNil) Error() string { panic(nil) }

func TestReview96ErrorTextPanics(t *testing.T) {
	for name, err := range map[string]error{
		"self":     review96Self{},
		"nilptr":   (*review96Nil)(nil),
		"panicnil": review96PanicNil{},
		"wrapped":  errors.Join(errors.New("x"), review96Self{}),
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("listener panicked: %T", r)
					}
				}()
				l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "d", Err: err})
			}()
			if !strings.Contains(buf.String(), "resilience") {
				t.Errorf("event lost: %q", buf.String())
			}
			t.Log(buf.String())
		})
	}
}
