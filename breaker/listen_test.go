package breaker_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// recorder records the events it hears as note names them; note returns
// "" for those it leaves out.
type recorder struct {
	mu   sync.Mutex
	got  []string
	note func(resilience.Event) string
}

func (r *recorder) OnEvent(e resilience.Event) {
	s := r.note(e)
	if s == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *recorder) Wants(resilience.EventKind) bool { return true }

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// changes returns a recorder of the state changes, as "name: from->to".
func changes() *recorder {
	return &recorder{note: func(e resilience.Event) string {
		if e.Kind != resilience.EventStateChange {
			return ""
		}
		return fmt.Sprintf("%s: %s->%s", e.Name, e.From, e.To)
	}}
}

// TestListenHearsUntilStopped: each listener that Listen added hears the
// state changes, its own breaker's listener too, until its stop is called
// (twice is fine); stopping one leaves the others.
func TestListenHearsUntilStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		own, first, second := changes(), changes(), changes()
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.WithListener(own))
		stopFirst := b.Listen(first)
		stopSecond := b.Listen(second)
		calls(b, 1, failed)
		stopFirst()
		stopFirst()
		time.Sleep(time.Second + time.Nanosecond)
		require.Equal(t, resilience.StateHalfOpen, b.State())
		stopSecond()
		calls(b, 1, ok)
		assert.Equal(t, []string{"dep: closed->open"}, first.list())
		assert.Equal(t, []string{"dep: closed->open", "dep: open->half-open"}, second.list())
		assert.Equal(t, []string{"dep: closed->open", "dep: open->half-open", "dep: half-open->closed"}, own.list())
	})
}

// TestListenOnNothing: a nil listener, or a breaker that is nil or zero,
// adds nothing, and its stop does nothing.
func TestListenOnNothing(t *testing.T) {
	heard := changes()
	var nothing *breaker.Breaker
	nothing.Listen(heard)()
	(&breaker.Breaker{}).Listen(heard)()
	b := breaker.New("dep", breaker.ConsecutiveFailures(1))
	b.Listen(nil)()
	calls(b, 1, failed)
	assert.Empty(t, heard.list())
}

// TestUnheard: a listener that b reports to already (WithListener) is
// left out; another is kept; a nil breaker reports to none.
func TestUnheard(t *testing.T) {
	own, other := changes(), changes()
	b := breaker.New("dep", breaker.WithListener(own))
	assert.Nil(t, b.Unheard(own))
	assert.NotNil(t, b.Unheard(other))
	var nothing *breaker.Breaker
	assert.NotNil(t, nothing.Unheard(own))
	assert.Nil(t, b.Unheard(nil))
}
