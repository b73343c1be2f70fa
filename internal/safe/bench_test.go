package safe_test

import (
	"testing"

	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// nop is a Filter and CallTimer that wants every event and records none.
type nop struct{}

func (nop) OnEvent(resilience.Event)        {}
func (nop) Wants(resilience.EventKind) bool { return true }
func (nop) TimeCall() bool                  { return false }

// BenchmarkListener is what a pipeline asks of a single listener on a
// successful call: the end of the call wanted and timed, attempts wanted,
// and an event passed on.
func BenchmarkListener(b *testing.B) {
	l := safe.New("dep", nop{})
	b.Run("CallStarts", func(b *testing.B) {
		for b.Loop() {
			l.CallStarts()
		}
	})
	b.Run("Wants", func(b *testing.B) {
		for b.Loop() {
			l.Wants(resilience.EventAttempt)
		}
	})
	b.Run("Wanted", func(b *testing.B) {
		for b.Loop() {
			l.Wanted(resilience.Event{Kind: resilience.EventAttempt, Attempt: 1})
		}
	})
}
