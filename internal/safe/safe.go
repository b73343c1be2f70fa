// Package safe keeps a listener from changing the outcome of a call: a
// listener that panics is reported, not let through into the breaker's
// counts or the caller's result, nor to the other listeners. Its Listener
// is the one fan-out of events to several listeners.
//
// A keeper of counts (package tally), the toolkit's own listener, is not
// guarded, and hears of no attempt: [Listener.Count] adds each to its
// counts, without an event.
package safe

import (
	"log/slog"
	"reflect"
	"slices"

	"github.com/resiliencekit/resiliencekit/internal/tally"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener passes events to the listeners it was made of, each on its own
// (a panic in one is logged, and the others still hear the event), and
// names the events that lack a name. Its methods are cheap on a nil
// *Listener, which wants nothing; the stages hold one, not an interface,
// so that asking it costs no dynamic call.
type Listener struct {
	ls       []resilience.Listener
	fs       []resilience.Filter    // fs[i] is ls[i] as a Filter; nil: it wants every event
	timers   []resilience.CallTimer // timers[i] is ls[i] if it is one, else nil
	keepers  []keeper               // called unguarded, after ls
	counts   []*tally.Counts        // the keepers', and those of the *Listeners in ls
	name     string
	filtered bool // some listener is a Filter or a keeper
	// attemptsTold: a pipeline tells its listeners of attempts itself,
	// having asked them once as the call started ([Listener.CallStarts]);
	// s is the copy its retry stage holds ([Listener.TellsNoAttempts]),
	// which only counts them.
	attemptsTold bool

	// The one listener, if it is the only one (no keeper), a Filter and
	// no *Listener: asked without a loop.
	one      resilience.Filter
	oneTimer resilience.CallTimer
}

// New returns a Listener of ls (nil ones skipped) that names unnamed
// events name, or nil if there is no listener. A single *Listener is
// returned as it is if it has that name or name is empty.
func New(name string, ls ...resilience.Listener) *Listener {
	s := &Listener{name: name}
	for _, l := range ls {
		if k, c := tally.Of(l); k != nil {
			s.keepers = append(s.keepers, keeper{k, c})
			s.counts = append(s.counts, c)
			s.filtered = true
			continue
		}
		var f resilience.Filter
		switch l := l.(type) {
		case nil:
			continue
		case *Listener:
			if l == nil {
				continue // a stage's listener not set yet
			}
			s.filtered = s.filtered || l.filtered
			s.counts = append(s.counts, l.counts...)
			if l.filtered {
				f = l
			}
		case resilience.Filter:
			s.filtered = true
			f = l
		}
		t, _ := l.(resilience.CallTimer)
		s.ls = append(s.ls, l)
		s.fs = append(s.fs, f) // asserted once here, not on every event
		s.timers = append(s.timers, t)
	}
	if len(s.ls) == 1 && len(s.keepers) == 0 {
		if _, nested := s.ls[0].(*Listener); !nested {
			s.one, s.oneTimer = s.fs[0], s.timers[0]
		}
	}
	switch {
	case len(s.ls) == 0 && len(s.keepers) == 0:
		return nil
	case len(s.ls) == 1 && len(s.keepers) == 0:
		if one, ok := s.ls[0].(*Listener); ok && (name == "" || one.name == name) {
			return one
		}
	}
	return s
}

// OnEvent passes e, named, to every listener that wants it. The end of a
// call that was not timed goes only to the CallTimers, the listeners that
// can have declined to time it (through the Listeners s was made of too).
func (s *Listener) OnEvent(e resilience.Event) {
	if s.attemptsTold && e.Kind == resilience.EventAttempt {
		return
	}
	if e.Name == "" {
		e.Name = s.name
	}
	for i, l := range s.ls {
		if e.Untimed && s.timers[i] == nil {
			if _, nested := l.(*Listener); !nested { // a nested one tells its own CallTimers
				continue
			}
		}
		deliver(l, s.fs[i], e)
	}
	for _, k := range s.keepers {
		if e.Kind == resilience.EventCallDone && !e.Untimed || e.Kind != resilience.EventCallDone && k.wants(e.Kind) { // a call timed: the one a keeper claimed, or every call
			k.l.OnEvent(e)
		}
	}
}

// keeper is a listener that keeps counts, with them.
type keeper struct {
	l tally.Keeper
	c *tally.Counts
}

// wants reports whether k wants events of kind: never attempts, which it
// counts, and what it says of the others but the end of a call, which
// the pipeline asks about once a call, as it starts (see
// [Listener.Wants]).
func (k keeper) wants(kind resilience.EventKind) bool {
	if kind == resilience.EventAttempt {
		return false
	}
	return k.l.Wants(kind)
}

// Count adds an attempt numbered n that ended with err to the keepers'
// counts; a nil s does nothing. It is the keepers' EventAttempt: they are
// not told of attempts.
func (s *Listener) Count(n int, err error) {
	if s == nil {
		return
	}
	for _, c := range s.counts {
		c.Attempt(n, err)
	}
}

// Wanted is OnEvent for an event whose kind the caller has just asked
// Wants about and heard yes: a single listener is not asked again.
func (s *Listener) Wanted(e resilience.Event) {
	if len(s.ls) != 1 || len(s.keepers) != 0 || s.attemptsTold {
		s.OnEvent(e)
		return
	}
	if e.Name == "" {
		e.Name = s.name
	}
	deliver(s.ls[0], nil, e)
}

// deliver passes e to l if f, l as a Filter, wants it (a nil f wants
// everything); a panic in f's Wants counts as no, and one in l's OnEvent
// is logged: neither goes further. A *Listener is not asked: its OnEvent
// asks its own, and its Wants of a call's end counts the call.
func deliver(l resilience.Listener, f resilience.Filter, e resilience.Event) {
	if f != nil {
		if _, fan := l.(*Listener); !fan && !wants(f, e.Kind) {
			return
		}
	}
	returned := false
	defer recovered(&returned, listenerPanicked, e.Kind)
	l.OnEvent(e)
	returned = true
}

// What panicked, for recovered.
const (
	listenerPanicked = iota
	wantsPanicked
	timeCallPanicked
	membersPanicked
)

var panicked = [...]string{"listener", "listener's Wants", "listener's TimeCall", "listener's Members"}

// recovered, deferred, logs a panic of what, in a listener told of or
// asked about an event of kind k, and stops it, unless the guarded call
// returned: recover is not free, and a call that returns never needs it.
// A deferred function of its own, not a closure, so that the frame it
// guards keeps nothing in memory for it.
func recovered(returned *bool, what int, k resilience.EventKind) {
	if *returned {
		return
	}
	if r := recover(); r != nil {
		logPanic(panicked[what], k, r)
	}
}

// Wants reports whether any listener wants events of kind k; a panic in a
// listener's Wants counts as no. Of [resilience.EventCallDone], it is
// [Listener.CallStarts]'s done; of [resilience.EventAttempt], always no
// from a copy that [Listener.TellsNoAttempts] made.
func (s *Listener) Wants(k resilience.EventKind) bool {
	if s == nil || s.attemptsTold && k == resilience.EventAttempt {
		return false // inlined: a call without a listener, or a retry stage's question, pays no call
	}
	return !s.filtered || s.someWants(k)
}

// TellsNoAttempts returns a copy of s for a pipeline's retry stage: it
// counts attempts ([Listener.Count]) but neither asks about nor passes on
// [resilience.EventAttempt], which the pipeline tells itself, having asked
// once as the call started ([Listener.CallStarts]). A nil s gives nil.
func (s *Listener) TellsNoAttempts() *Listener {
	if s == nil {
		return nil
	}
	c := *s
	c.attemptsTold = true
	return &c
}

// Attempted passes an attempt numbered n that ended with err, as an
// EventAttempt, to the listeners other than keepers that want it, and
// counts nothing: it is for a caller that [Listener.CallStarts] told that
// some listener wants attempts (a single listener is not asked again) and
// whose retry stage counts them.
func (s *Listener) Attempted(n int, err error) {
	e := resilience.Event{Kind: resilience.EventAttempt, Name: s.name, Attempt: n, Err: err}
	if s.one != nil { // a lone listener, asked as the call started
		deliver(s.ls[0], nil, e)
		return
	}
	for i, l := range s.ls {
		if s.fs[i] == nil || wants(s.fs[i], e.Kind) {
			deliver(l, nil, e)
		}
	}
}

// CallStarts reports whether a listener wants the end of a call
// ([resilience.EventCallDone]) that starts, whether the call is to be
// timed for it (a keeper claimed it to be timed ([tally.Counts.Call]), or
// a listener that wants its end is not a [resilience.CallTimer] or is one
// that wants it timed), and whether a listener other than a keeper wants
// its attempts ([resilience.EventAttempt]). A pipeline asks it once a
// call, as the call starts, and only then: it counts the call in the
// keepers' counts. A nil s wants nothing; a caller that checks for nil
// first pays no call without a listener.
func (s *Listener) CallStarts() (done, timed, attempts bool) {
	if s != nil && s.one != nil { // inlined: one call on the common path
		return callWanted(s.one, s.oneTimer, false)
	}
	return s.callStarts(false)
}

// someWants reports whether some keeper or listener says yes to k. Of
// the end of a call, every keeper and listener is asked: each keeper
// counts the call.
func (s *Listener) someWants(k resilience.EventKind) bool {
	if k == resilience.EventCallDone {
		done, _, _ := s.CallStarts()
		return done
	}
	if s.one != nil {
		return wants(s.one, k)
	}
	for _, kp := range s.keepers {
		if kp.wants(k) {
			return true
		}
	}
	for _, f := range s.fs {
		if wants(f, k) {
			return true
		}
	}
	return false
}

// callStarts counts a call in every keeper's counts (those of the
// *Listeners s was made of too) and reports whether a keeper claimed it
// to be timed or a listener wants its end (done), whether it is to be
// timed (timed, already if a listener before s had it timed): a CallTimer
// is asked only while no keeper or listener before it has had the call
// timed; and whether a listener wants its attempts.
func (s *Listener) callStarts(already bool) (done, timed, attempts bool) {
	if s == nil || !s.filtered {
		return s != nil, s != nil, s != nil
	}
	timed = already
	for _, kp := range s.keepers {
		if kp.c.Call() {
			done, timed = true, true
		}
	}
	for i, l := range s.ls {
		if n, ok := l.(*Listener); ok { // a stage's own: its keepers count the call too
			d, t, a := true, true, true
			if n.filtered {
				d, t, a = n.callStarts(timed)
			}
			done, timed, attempts = done || d, t, attempts || a
			continue
		}
		d, t, a := callWanted(s.fs[i], s.timers[i], timed)
		done, timed, attempts = done || d, timed || t, attempts || a
	}
	return done, timed, attempts
}

// callWanted asks a listener, as f (a Filter, or nil if it is none) and
// t (a CallTimer, or nil), whether it wants the end of a call that starts,
// whether it wants its attempts, and, if it wants its end and the call is
// not timed already, whether it wants the call timed: a listener that is
// no CallTimer does. The three questions share one guard, as they are
// asked on every call; a panic in one (logged) counts as no to it (as yes
// to TimeCall), and those it cut short are asked each under a guard of
// its own, so that a fault in one question changes no other answer.
func callWanted(f resilience.Filter, t resilience.CallTimer, already bool) (done, timed, attempts bool) {
	asked := 0 // questions answered, in order: the end, the attempts, the timing
	defer func() {
		if asked == 3 {
			return
		}
		r := recover()
		if r == nil {
			return // runtime.Goexit: it goes on
		}
		switch asked {
		case 0:
			logPanic(panicked[wantsPanicked], resilience.EventCallDone, r)
			done, timed, attempts = false, false, wants(f, resilience.EventAttempt)
		case 1:
			logPanic(panicked[wantsPanicked], resilience.EventAttempt, r)
			attempts, timed = false, timing(t, done, already)
		default:
			logPanic(panicked[timeCallPanicked], resilience.EventCallDone, r)
			timed = true
		}
	}()
	done = f == nil || f.Wants(resilience.EventCallDone)
	asked = 1
	attempts = f == nil || f.Wants(resilience.EventAttempt)
	asked = 2
	if asksTimeCall(t, done, already) {
		timed = t.TimeCall()
	} else {
		timed = done
	}
	asked = 3
	return done, timed, attempts
}

// timing asks t, under a guard of its own, whether it wants a call timed
// whose end is wanted (done), as callWanted does; a panic counts as yes.
func timing(t resilience.CallTimer, done, already bool) (timed bool) {
	if !asksTimeCall(t, done, already) {
		return done
	}
	returned := false
	defer func() {
		if !returned {
			if r := recover(); r != nil {
				logPanic(panicked[timeCallPanicked], resilience.EventCallDone, r)
				timed = true
			}
		}
	}()
	timed = t.TimeCall()
	returned = true
	return timed
}

// asksTimeCall reports whether a call's timing is t's to decide: t is a
// CallTimer, the call's end is wanted (done), and no listener before has
// had it timed (already); otherwise it is timed if its end is wanted.
func asksTimeCall(t resilience.CallTimer, done, already bool) bool {
	return done && !already && t != nil
}

// wants asks f, a listener as a Filter (nil if it is none, which wants
// every kind), whether it wants k; a panic counts as no.
func wants(f resilience.Filter, k resilience.EventKind) (yes bool) {
	if f == nil {
		return true
	}
	returned := false
	defer recovered(&returned, wantsPanicked, k)
	yes = f.Wants(k)
	returned = true
	return yes
}

// Emit passes e to the listeners that want it; a nil s does nothing. Each
// is asked once: an event already built needs no check before.
func (s *Listener) Emit(e resilience.Event) {
	if s != nil {
		s.OnEvent(e)
	}
}

// logPanic logs a recovered panic of a listener. It takes the kind, not
// its name, so that a call without a panic pays for no string.
func logPanic(what string, k resilience.EventKind, r any) {
	LogPanic("resiliencekit: a "+what+" panicked; the call goes on as if it had not", "event", k.String(), "panic", r)
}

// LogPanic logs a recovered panic, msg with args, with slog's default
// logger: the one place such a panic can go without changing the call it
// happened in. It logs on a goroutine of its own, and waits for it: a
// default logger that panics too has nowhere left to say so, and its
// panic is dropped (review164); one that calls runtime.Goexit ends that
// goroutine, not the caller's (review167).
func LogPanic(msg string, args ...any) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		slog.Error(msg, args...)
	}()
	<-done
}

// Without returns s less the listeners that o passes events to, or nil if
// none is left; a nil o leaves s as it is. Listeners are the same if they
// are equal values of a comparable type, such as one pointer: a
// func, such as a resilience.ListenerFunc, is never the same as another.
func (s *Listener) Without(o *Listener) *Listener {
	if s == nil || o == nil {
		return s
	}
	all := s.members()
	theirs := o.members()
	var keep []resilience.Listener
	for _, l := range all {
		if !slices.ContainsFunc(theirs, func(m resilience.Listener) bool { return same(l, m) }) {
			keep = append(keep, l)
		}
	}
	if len(keep) == len(all) {
		return s
	}
	return New(s.name, keep...)
}

// members returns the listeners s passes events to, those of the
// *Listeners it was made of included.
func (s *Listener) members() []resilience.Listener {
	var out []resilience.Listener
	for _, l := range s.ls {
		out = append(out, Members(l)...)
	}
	for _, k := range s.keepers {
		out = append(out, k.l)
	}
	return out
}

// same reports whether a and b are one listener.
func same(a, b resilience.Listener) (yes bool) {
	defer func() {
		if recover() != nil {
			yes = false // a comparable type holding a value that is not
		}
	}()
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// Members returns the listeners that l passes events to: l's members if
// it is a *Listener or has a Members method of that shape (as a listener
// that forwards to another does), else l itself; none for a nil l.
func Members(l resilience.Listener) []resilience.Listener {
	switch l := l.(type) {
	case nil:
		return nil
	case *Listener:
		if l == nil {
			return nil
		}
		return l.members()
	case interface{ Members() []resilience.Listener }:
		ms, ok := members(l)
		if !ok {
			return []resilience.Listener{l.(resilience.Listener)}
		}
		var out []resilience.Listener
		for _, m := range ms {
			out = append(out, Members(m)...)
		}
		return out
	}
	return []resilience.Listener{l}
}

// members returns l's Members, or false if Members panics (the panic is
// logged): a listener's fault changes no call.
func members(l interface{ Members() []resilience.Listener }) (ms []resilience.Listener, ok bool) {
	returned := false
	defer recovered(&returned, membersPanicked, 0)
	ms = l.Members()
	returned = true
	return ms, true
}

// Fan passes e once to each listener among the members of ls that wants
// it, in order, however many of ls it is a member of: a listener given
// both to a breaker and to the pipelines built on it hears each of the
// breaker's events once.
func Fan(e resilience.Event, ls ...resilience.Listener) {
	var seen []resilience.Listener
	for _, l := range ls {
		for _, m := range Members(l) {
			if slices.ContainsFunc(seen, func(s resilience.Listener) bool { return same(s, m) }) {
				continue
			}
			seen = append(seen, m)
			f, _ := m.(resilience.Filter)
			deliver(m, f, e)
		}
	}
}
