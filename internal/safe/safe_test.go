package safe_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// keeper keeps counts and records the events it is told of; it wants
// retries, and what its Wants is asked.
type keeper struct {
	tally.Counts
	heard []resilience.Event
	asked []resilience.EventKind
}

func (k *keeper) OnEvent(e resilience.Event) { k.heard = append(k.heard, e) }

func (k *keeper) Wants(kind resilience.EventKind) bool {
	k.asked = append(k.asked, kind)
	return kind == resilience.EventRetry || kind == resilience.EventAttempt // attempts: said, not heeded
}

// recorder records every event.
type recorder struct{ heard []resilience.Event }

func (r *recorder) OnEvent(e resilience.Event) { r.heard = append(r.heard, e) }

var errDown = errors.New("down")

func TestAKeeperCountsAttemptsWithoutAnEvent(t *testing.T) {
	k := &keeper{}
	l := safe.New("db", k)
	require.NotNil(t, l)
	assert.False(t, l.Wants(resilience.EventAttempt), "attempts are counted, not told")
	l.Count(1, nil)
	l.Count(1, errDown)
	l.Count(2, nil)
	l.Attempted(2, nil)
	l.Emit(resilience.Event{Kind: resilience.EventAttempt, Attempt: 1})
	_, first, later := k.Load()
	assert.Equal(t, [4]uint64{1, 1, 1, 0}, [4]uint64{first.OK, first.Failed, later.OK, later.Failed})
	assert.Empty(t, k.heard)
	assert.Empty(t, k.asked, "its Wants is not asked of attempts")

	l.Emit(resilience.Event{Kind: resilience.EventRetry, Attempt: 1})
	l.Emit(resilience.Event{Kind: resilience.EventHedged})
	require.Len(t, k.heard, 1)
	assert.Equal(t, resilience.Event{Kind: resilience.EventRetry, Name: "db", Attempt: 1}, k.heard[0])
	assert.True(t, l.Wants(resilience.EventRetry))
	assert.False(t, l.Wants(resilience.EventHedged))
}

func TestAKeeperHearsOfTheCallItsCountsAskToTime(t *testing.T) {
	k := &keeper{}
	l := safe.New("db", k)
	assert.True(t, l.Wants(resilience.EventCallDone), "the first call is timed")
	_ = l.Wants(resilience.EventCallDone) // timed 1 time in 127: the gap to the next sample is drawn from 1 to 127 (TestAKeeperTimesAboutOneCallIn64)
	l.OnEvent(resilience.Event{Kind: resilience.EventCallDone})
	assert.Len(t, k.heard, 1)
	assert.NotContains(t, k.asked, resilience.EventCallDone, "its counts answer")
	calls, _, _ := k.Load()
	assert.EqualValues(t, 2, calls, "each question of a call's end is a call starting")
}

// Two keepers and a nested listener are each asked of a call's end: each
// counts the call, whichever said yes first.
func TestEveryKeeperCountsACall(t *testing.T) {
	k1, k2, k3 := &keeper{}, &keeper{}, &keeper{}
	l := safe.New("db", k1, k2, safe.New("inner", k3))
	assert.True(t, l.Wants(resilience.EventCallDone))
	for _, k := range []*keeper{k1, k2, k3} {
		calls, _, _ := k.Load()
		assert.EqualValues(t, 1, calls)
	}
}

func TestOtherListenersHearAttemptsAsBefore(t *testing.T) {
	k, r := &keeper{}, &recorder{}
	l := safe.New("db", r, k)
	assert.True(t, l.Wants(resilience.EventAttempt))
	l.Count(1, errDown)
	l.Attempted(1, errDown)
	assert.Equal(t, []resilience.Event{{Kind: resilience.EventAttempt, Name: "db", Attempt: 1, Err: errDown}}, r.heard)
	assert.Empty(t, k.heard)
	_, f, _ := k.Load()
	assert.EqualValues(t, 1, f.Failed)
	assert.Equal(t, []resilience.Listener{r, k}, safe.Members(l))
}

func TestAKeeperInAListenerOfListenersCountsOnce(t *testing.T) {
	k, r := &keeper{}, &recorder{}
	inner := safe.New("db", k)
	outer := safe.New("", r, inner)
	outer.Count(1, nil)
	_, f, _ := k.Load()
	assert.EqualValues(t, 1, f.OK)
	assert.Same(t, inner, safe.New("", inner), "one listener is kept as it is")
	assert.Same(t, inner, safe.New("", inner).Without(safe.New("", r)), "nothing to take away")
	assert.Nil(t, inner.Without(inner), "the keeper taken away")
	again := outer.Without(safe.New("", r))
	again.Count(1, nil)
	_, f, _ = k.Load()
	assert.EqualValues(t, 2, f.OK, "still counted once")
	var none *safe.Listener
	none.Count(1, nil)
}

// panicky panics in Wants or in OnEvent.
type panicky struct{ inWants bool }

func (p panicky) OnEvent(resilience.Event) {
	if !p.inWants {
		panic("listener")
	}
}

func (p panicky) Wants(resilience.EventKind) bool {
	if p.inWants {
		panic("wants")
	}
	return true
}

// forwarder passes events on to another listener, and says so.
type forwarder struct{ to resilience.Listener }

func (f forwarder) OnEvent(e resilience.Event)        { f.to.OnEvent(e) }
func (f forwarder) Members() []resilience.Listener    { return []resilience.Listener{f.to} }
func (forwarder) Wants(k resilience.EventKind) bool   { return true }
func (r *recorder) Wants(k resilience.EventKind) bool { return true }
func (r *recorder) kinds() (out []resilience.EventKind) {
	for _, e := range r.heard {
		out = append(out, e.Kind)
	}
	return out
}

func TestAPanickingListenerIsHeldBackAndTheOthersHear(t *testing.T) {
	k, r := &keeper{}, &recorder{}
	l := safe.New("db", panicky{}, panicky{inWants: true}, r, k)
	assert.True(t, l.Wants(resilience.EventRetry))
	l.Emit(resilience.Event{Kind: resilience.EventRetry})
	l.Count(1, errDown)
	l.Attempted(1, errDown)
	assert.Equal(t, []resilience.EventKind{resilience.EventRetry, resilience.EventAttempt}, r.kinds())
	assert.Len(t, k.heard, 1)
	assert.False(t, safe.New("", panicky{inWants: true}).Wants(resilience.EventRetry), "a panic in Wants is a no")
}

func TestFanTellsEachListenerOnce(t *testing.T) {
	k, r := &keeper{}, &recorder{}
	pipe := safe.New("db", r, k)
	safe.Fan(resilience.Event{Kind: resilience.EventRetry}, forwarder{r}, pipe, nil)
	assert.Len(t, r.heard, 1)
	assert.Len(t, k.heard, 1)
	assert.Nil(t, safe.Members(nil))
	assert.Nil(t, safe.Members((*safe.Listener)(nil)))
	assert.Equal(t, []resilience.Listener{r}, safe.Members(forwarder{r}))
}

// timer is a CallTimer that wants every event and says time to TimeCall,
// counting how often it was asked; a timer with panics set panics there.
type timer struct {
	recorder
	time   bool
	panics bool
	asked  int
}

func (*timer) Wants(resilience.EventKind) bool { return true }

func (t *timer) TimeCall() bool {
	t.asked++
	if t.panics {
		panic("TimeCall")
	}
	return t.time
}

func TestACallTimerThatDeclinesLeavesTheCallUntimed(t *testing.T) {
	tm := &timer{}
	l := safe.New("db", tm)
	done, timed, _ := l.CallStarts()
	assert.True(t, done)
	assert.False(t, timed)
	assert.Equal(t, 1, tm.asked)
	tm.time = true
	done, timed, _ = l.CallStarts()
	assert.True(t, done)
	assert.True(t, timed)
}

// A listener that is no CallTimer wants every call it wants the end of
// timed: the CallTimer is not asked then, and hears of the call timed.
func TestAnotherListenerHasTheCallTimed(t *testing.T) {
	tm, r := &timer{}, &recorder{}
	l := safe.New("db", r, tm)
	done, timed, _ := l.CallStarts()
	assert.True(t, done)
	assert.True(t, timed)
	assert.Zero(t, tm.asked, "the call is timed already")
	l.Emit(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Second})
	assert.Equal(t, []resilience.Event{{Kind: resilience.EventCallDone, Name: "db", Duration: time.Second}}, tm.heard)
}

// The end of an untimed call goes to the CallTimers alone: a keeper that
// did not claim the call, and a listener that would take its zero
// Duration for one, do not hear of it.
func TestAnUntimedCallIsToldOnlyToCallTimers(t *testing.T) {
	k, r, tm := &keeper{}, &recorder{}, &timer{}
	l := safe.New("db", k, tm, r)
	require.True(t, l.Wants(resilience.EventCallDone), "the keeper's first call is timed")
	untimed := resilience.Event{Kind: resilience.EventCallDone, Err: errDown, Untimed: true}
	l.Emit(untimed)
	untimed.Name = "db"
	assert.Equal(t, []resilience.Event{untimed}, tm.heard)
	assert.Empty(t, r.heard)
	assert.Empty(t, k.heard)
	l.Emit(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Second})
	assert.Len(t, tm.heard, 2)
	assert.Len(t, r.heard, 1)
	assert.Len(t, k.heard, 1)
}

// A keeper's claim times the call: the CallTimer is not asked, and the
// keeper still counts every call; a nested Listener's answer counts as
// its members'.
func TestAKeepersClaimTimesTheCall(t *testing.T) {
	k, tm := &keeper{}, &timer{}
	l := safe.New("db", k, safe.New("inner", tm))
	done, timed, _ := l.CallStarts()
	assert.True(t, done)
	assert.True(t, timed, "the keeper's first call is timed")
	assert.Zero(t, tm.asked)
	n := 1
	for {
		// The keeper's next sample comes after a random gap, of a single
		// call once in 2*SampleEvery-1 (tally): then it claims this one
		// too, and the timer is not asked.
		n++
		if done, timed, _ = l.CallStarts(); !timed || n > 10 {
			break
		}
		assert.True(t, done)
		assert.Zero(t, tm.asked)
	}
	assert.True(t, done, "the timer wants every call's end")
	assert.False(t, timed, "neither the keeper nor the timer wants it timed")
	assert.Equal(t, 1, tm.asked)
	calls, _, _ := k.Load()
	assert.EqualValues(t, n, calls)
}

func TestAPanickingTimeCallTimesTheCall(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	l := safe.New("db", &timer{panics: true})
	done, timed, _ := l.CallStarts()
	assert.True(t, done)
	assert.True(t, timed)
	assert.Contains(t, logged.String(), "listener's TimeCall panicked")
}

func TestNoListenerWantsNoCall(t *testing.T) {
	var l *safe.Listener
	done, timed, _ := l.CallStarts()
	assert.False(t, done)
	assert.False(t, timed)
	done, timed, _ = safe.New("db", &recorder{}).CallStarts()
	assert.True(t, done)
	assert.True(t, timed)
}

// panickyWants is a Filter whose Wants panics.
type panickyWants struct{ recorder }

func (*panickyWants) Wants(resilience.EventKind) bool { panic("Wants") }

// A lone Filter, asked without the loop over listeners, is guarded too: a
// panic in its Wants counts as no.
func TestALoneFiltersPanicCountsAsNo(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	l := safe.New("db", &panickyWants{})
	assert.False(t, l.Wants(resilience.EventAttempt))
	done, timed, attempts := l.CallStarts()
	assert.False(t, done)
	assert.False(t, timed)
	assert.False(t, attempts)
	assert.Equal(t, 3, strings.Count(logged.String(), "listener's Wants panicked"), "each question, on its own")
}

// A CallTimer in a nested Listener hears of the call it declined to time.
func TestANestedCallTimerHearsOfItsUntimedCall(t *testing.T) {
	tm := &timer{}
	l := safe.New("db", safe.New("inner", tm), &keeper{})
	l.CallStarts() // the keeper's first call: timed
	done, timed, _ := l.CallStarts()
	for i := 0; timed && i < 8; i++ { // the keeper times one call in about 64, drawn at random: the next may be one
		done, timed, _ = l.CallStarts()
	}
	require.True(t, done)
	require.False(t, timed)
	l.Emit(resilience.Event{Kind: resilience.EventCallDone, Untimed: true})
	assert.Equal(t, []resilience.Event{{Kind: resilience.EventCallDone, Name: "db", Untimed: true}}, tm.heard)
}

// panicsOn is a listener whose Wants panics for one kind.
type panicsOn resilience.EventKind

func (panicsOn) OnEvent(resilience.Event) {}
func (p panicsOn) Wants(k resilience.EventKind) bool {
	if k == resilience.EventKind(p) {
		panic("wants " + k.String())
	}
	return true
}

// The three questions a call starts with share one guard: a panic in one
// counts as no to it (as yes to TimeCall), and changes no other answer.
func TestCallStartsAsksAttemptsUnderItsGuard(t *testing.T) {
	for _, c := range []struct {
		name string
		l    resilience.Listener
		want [3]bool // done, timed, attempts
	}{
		{"Wants(attempt) panics", panicsOn(resilience.EventAttempt), [3]bool{true, true, false}},
		{"Wants(call done) panics", panicsOn(resilience.EventCallDone), [3]bool{false, false, true}},
		{"nothing panics", panicsOn(resilience.EventRetry), [3]bool{true, true, true}},
		{"a CallTimer declines, Wants(attempt) panics", declines{panicsOn(resilience.EventAttempt)}, [3]bool{true, false, false}},
		{"a CallTimer declines, Wants(call done) panics", declines{panicsOn(resilience.EventCallDone)}, [3]bool{false, false, true}},
		{"TimeCall panics", timePanics{panicsOn(resilience.EventRetry)}, [3]bool{true, true, true}},
	} {
		done, timed, attempts := safe.New("db", c.l).CallStarts()
		assert.Equal(t, c.want, [3]bool{done, timed, attempts}, c.name)
	}
}

// declines is a CallTimer that wants no call timed.
type declines struct{ panicsOn }

func (declines) TimeCall() bool { return false }

// timePanics is a CallTimer whose TimeCall panics.
type timePanics struct{ panicsOn }

func (timePanics) TimeCall() bool { panic("TimeCall") }

// A retry stage's copy neither asks about attempts nor passes them on,
// and still counts them.
func TestTellsNoAttempts(t *testing.T) {
	l := &askCounter{}
	s := safe.New("db", l)
	c := s.TellsNoAttempts()
	assert.False(t, c.Wants(resilience.EventAttempt))
	c.Count(1, nil)
	c.OnEvent(resilience.Event{Kind: resilience.EventAttempt})
	c.Wanted(resilience.Event{Kind: resilience.EventAttempt})
	assert.Zero(t, l.asked.Load(), "not asked")
	assert.Zero(t, l.heard.Load(), "not told")
	assert.True(t, c.Wants(resilience.EventRetry))
	s.Attempted(2, nil)
	assert.Equal(t, int64(1), l.heard.Load(), "the pipeline tells, without asking again")
	assert.Nil(t, (*safe.Listener)(nil).TellsNoAttempts())
}

// askCounter counts the questions and events it gets.
type askCounter struct{ asked, heard atomic.Int64 }

func (a *askCounter) OnEvent(resilience.Event)        { a.heard.Add(1) }
func (a *askCounter) Wants(resilience.EventKind) bool { a.asked.Add(1); return true }

// What CallStarts answers for listeners that are no Filter, and for
// several, and what Wanted and Attempted ask again: a single listener
// nothing, several each its own Filter.
func TestCallStartsAndAttemptedAcrossListeners(t *testing.T) {
	for _, l := range []*safe.Listener{safe.New("db", plain{}), safe.New("db", plain{}, plain{})} {
		done, timed, attempts := l.CallStarts()
		assert.Equal(t, [3]bool{true, true, true}, [3]bool{done, timed, attempts}, "listeners that are no Filter want it all")
	}
	var named plainNamed
	safe.New("db", &named).Wanted(resilience.Event{Kind: resilience.EventRetry})
	assert.Equal(t, "db", named.name, "Wanted names an unnamed event")

	done, timed, attempts := safe.New("db", both{timePanics{panicsOn(resilience.EventAttempt)}}).CallStarts()
	assert.Equal(t, [3]bool{true, true, false}, [3]bool{done, timed, attempts}, "TimeCall panics on its own guard too: yes")

	one := &askCounter{}
	l := safe.New("db", one)
	l.Wanted(resilience.Event{Kind: resilience.EventRetry})
	l.Attempted(1, nil)
	assert.Zero(t, one.asked.Load(), "a single listener is not asked again")
	assert.Equal(t, int64(2), one.heard.Load())

	wantsAttempts, wantsNone := &askCounter{}, &onlyKind{kind: resilience.EventCallDone}
	l = safe.New("db", wantsAttempts, wantsNone)
	l.Attempted(1, nil)
	assert.Equal(t, int64(1), wantsAttempts.heard.Load())
	assert.Zero(t, wantsNone.heard.Load(), "of several, each asked")
}

// both is a Filter and CallTimer made of one that panics somewhere.
type both struct{ timePanics }

// onlyKind wants events of one kind, and counts those it hears.
type onlyKind struct {
	kind  resilience.EventKind
	heard atomic.Int64
}

func (o *onlyKind) OnEvent(resilience.Event)          { o.heard.Add(1) }
func (o *onlyKind) Wants(k resilience.EventKind) bool { return k == o.kind }

// plain is a listener that is no Filter.
type plain struct{}

func (plain) OnEvent(resilience.Event) {}

// plainNamed is a listener that is no Filter, and keeps the name of the
// last event it heard.
type plainNamed struct{ name string }

func (p *plainNamed) OnEvent(e resilience.Event) { p.name = e.Name }

// filterRecorder is a Filter that wants every event, and records them.
type filterRecorder struct{ recorder }

func (*filterRecorder) Wants(resilience.EventKind) bool { return true }

// Attempted tells the attempt, named, numbered and with its error, to a
// lone Filter (without asking it again) as to each of several.
func TestAttemptedTellsTheAttempt(t *testing.T) {
	want := resilience.Event{Kind: resilience.EventAttempt, Name: "db", Attempt: 2, Err: errDown}
	one := &filterRecorder{}
	safe.New("db", one).Attempted(2, errDown)
	assert.Equal(t, []resilience.Event{want}, one.heard, "a lone Filter")

	a, b := &filterRecorder{}, &recorder{}
	safe.New("db", a, b).Attempted(2, errDown)
	assert.Equal(t, []resilience.Event{want}, a.heard, "a Filter of several")
	assert.Equal(t, []resilience.Event{want}, b.heard, "a listener of several that is no Filter")
}

// A timed call claims its sample: the calls after it are timed about one
// in tally.SampleEvery (the gaps drawn from 1 to 127), not each call once
// the sample is due (ci147: the test above asserted the next call never
// was, 1 time in 127 it is).
func TestAKeeperTimesAboutOneCallIn64(t *testing.T) {
	l := safe.New("db", &keeper{})
	timed := 0
	for range 64_000 {
		if l.Wants(resilience.EventCallDone) {
			timed++
		}
	}
	assert.InDelta(t, 1000, timed, 100, "one call in about 64 timed (the spread is about 18)")
}
