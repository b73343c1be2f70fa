package safe

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type rvKeeper struct {
	tally.Counts
	got atomic.Int32
}

func (k *rvKeeper) Wants(resilience.EventKind) bool { return false }
func (k *rvKeeper) OnEvent(resilience.Event)        { k.got.Add(1) }

type rvFilter struct {
	want map[resilience.EventKind]bool
	got  map[resilience.EventKind]int
	asks int
}

func (f *rvFilter) Wants(k resilience.EventKind) bool { f.asks++; return f.want[k] }
func (f *rvFilter) OnEvent(e resilience.Event) {
	if f.got == nil {
		f.got = map[resilience.EventKind]int{}
	}
	f.got[e.Kind]++
}

type rvAll struct{ got map[resilience.EventKind]int }

func (a *rvAll) OnEvent(e resilience.Event) {
	if a.got == nil {
		a.got = map[resilience.EventKind]int{}
	}
	a.got[e.Kind]++
}

type rvPanicWants struct{ got int }

func (p *rvPanicWants) Wants(resilience.EventKind) bool { panic("wants") }
func (p *rvPanicWants) OnEvent(resilience.Event)        { p.got++ }

type rvPanicOn struct{}

func (rvPanicOn) OnEvent(resilience.Event) { panic("on") }

// Events reach exactly the listeners that want them, nested or not, and
// panics in Wants or OnEvent stay in.
func TestReviewDeliveryExactlyToWanting(t *testing.T) {
	f := &rvFilter{want: map[resilience.EventKind]bool{resilience.EventAttempt: true}}
	g := &rvFilter{want: map[resilience.EventKind]bool{resilience.EventRetry: true}}
	a := &rvAll{}
	pw := &rvPanicWants{}
	inner := New("inner", g, rvPanicOn{})
	s := New("outer", f, inner, a, pw, rvPanicOn{})
	s.Count(1, errors.New("x"))
	s.Attempted(1, errors.New("x"))
	s.OnEvent(resilience.Event{Kind: resilience.EventRetry})
	s.OnEvent(resilience.Event{Kind: resilience.EventRejected})
	if f.got[resilience.EventAttempt] != 1 || f.got[resilience.EventRetry] != 0 || f.got[resilience.EventRejected] != 0 {
		t.Errorf("f got %v", f.got)
	}
	if g.got[resilience.EventAttempt] != 0 || g.got[resilience.EventRetry] != 1 || g.got[resilience.EventRejected] != 0 {
		t.Errorf("g (nested) got %v", g.got)
	}
	if a.got[resilience.EventAttempt] != 1 || a.got[resilience.EventRetry] != 1 || a.got[resilience.EventRejected] != 1 {
		t.Errorf("a got %v", a.got)
	}
	if pw.got != 0 {
		t.Errorf("a listener whose Wants panics heard %d", pw.got)
	}
	if !s.Wants(resilience.EventRejected) || New("", f, g).Wants(resilience.EventRejected) {
		t.Error("Wants")
	}
}

// A keeper inside a nested *Listener: the pipeline asks Wants of
// EventCallDone once a call (counting the call), then passes the call's
// end with OnEvent; passing it on to the nested *Listener asks the nested
// one's Wants(EventCallDone) again, which counts the call again.
func TestReviewNestedKeeperCallCountedOnce(t *testing.T) {
	k := &rvKeeper{}
	inner := New("inner", k)
	other := &rvFilter{want: map[resilience.EventKind]bool{resilience.EventCallDone: true}}
	outer := New("outer", inner, other)
	for range 10 {
		if outer.Wants(resilience.EventCallDone) { // as pipeline.start does, once a call
			outer.Wanted(resilience.Event{Kind: resilience.EventCallDone})
		}
	}
	calls, _, _ := k.Load()
	if calls != 10 {
		t.Errorf("10 calls counted as %d by the nested keeper", calls)
	}
}
