package pipeline

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// hedgeTimers is the timers for the hedging delays of every race of a
// pipeline: a race waiting for its next hedge is in a heap by when it is
// due, and a timer is set for the first of them. A race that is armed and
// then answers before its hedge is due, as nearly every race does, costs a
// push and a removal under a lock, and no timer, func or goroutine of its
// own; a timer is set again only when a race comes due before it fires
// (with a fixed delay, only once it has fired). The races are spread over
// a few shards, each a heap with its lock and timer, so that calls on
// several processors seldom wait for one another's lock. It is safe for
// concurrent use.
type hedgeTimers struct {
	shards [timerShards]timerShard
	clock  func() monotime.Reading // nil: monotime.Now; a test's own
	made   atomic.Uint32           // races made, which shards deal them

	spares racePools // the memory of the races that answered before their hedge was due
}

// timerShards is the number of shards of a pipeline's hedgeTimers.
const timerShards = 8

// timerShard is a heap of races and its timer.
type timerShard struct {
	mu    sync.Mutex
	due   dueHeap
	timer *time.Timer      // made on first use
	at    monotime.Reading // when the timer fires, while set
	set   bool
	_     [64]byte // a cache line apart from the next shard's lock
}

// now reads t's clock.
func (t *hedgeTimers) now() monotime.Reading {
	if t.clock != nil {
		return t.clock()
	}
	return monotime.Now()
}

// deal returns the shard for a race made now: each in turn.
func (t *hedgeTimers) deal() uint32 {
	return t.made.Add(1) % timerShards
}

// hedgeDue is a race's place in the heap of its shard; the race keeps it.
type hedgeDue struct {
	at    monotime.Reading
	race  interface{ fire() } // a pointer: no allocation
	pos   int                 // index in the heap + 1; 0 when not in it
	shard uint32              // set as the race is made, and kept
}

// add puts e in the heap of its shard, due d from now, and reports true;
// or, in a testing/synctest bubble, reports false and leaves e to a timer
// of its race's own. A bubble's clock starts in 2000, before the process
// began, so a reading there is negative; and a timer made in one bubble,
// or outside, must not be used from another, or outside, which one timer
// for a pipeline shared by tests would be.
func (t *hedgeTimers) add(e *hedgeDue, d time.Duration) bool {
	now := t.now()
	if now < 0 {
		return false
	}
	e.at = now + monotime.Reading(d)
	s := &t.shards[e.shard]
	s.mu.Lock()
	s.due.push(e)
	if !s.set || e.at < s.at {
		t.reset(s, now)
	}
	s.mu.Unlock()
	return true
}

// remove takes e out of the heap of its shard, if it is there, and
// reports whether it was: if it was, the timer will not fire it for the
// add before. The timer is left set: stopping it and setting it again for
// the next race would cost two operations on the runtime's timers per
// call; left set, it fires at most once a hedging delay for races that
// answered, finds none due, and is set again only if a race waits.
func (t *hedgeTimers) remove(e *hedgeDue) bool {
	s := &t.shards[e.shard]
	s.mu.Lock()
	in := e.pos != 0
	if in {
		s.due.remove(e.pos - 1)
	}
	s.mu.Unlock()
	return in
}

// reset sets the timer of s for the first race due; s.mu is held.
func (t *hedgeTimers) reset(s *timerShard, now monotime.Reading) {
	if len(s.due) == 0 {
		return
	}
	s.at, s.set = s.due[0].at, true
	d := time.Duration(s.at - now)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, func() { t.expire(s) })
	} else {
		s.timer.Reset(d)
	}
}

// expire fires every race of s due, on the timer's goroutine, and sets the
// timer for the next.
func (t *hedgeTimers) expire(s *timerShard) {
	s.mu.Lock()
	s.set = false
	now := t.now()
	var fire []interface{ fire() }
	for len(s.due) > 0 && s.due[0].at <= now {
		fire = append(fire, s.due.remove(0).race)
	}
	t.reset(s, now)
	s.mu.Unlock()
	for _, r := range fire {
		r.fire() // takes the race's lock, and may add it again
	}
}

// dueHeap orders races by when their next hedge is due: a binary heap
// whose entries know their place in it (pos).
type dueHeap []*hedgeDue

// push puts e in h.
func (h *dueHeap) push(e *hedgeDue) {
	*h = append(*h, e)
	h.up(len(*h)-1, e)
}

// remove takes the entry at index i out of h and returns it.
func (h *dueHeap) remove(i int) *hedgeDue {
	s := *h
	e, last := s[i], len(s)-1
	moved := s[last]
	s[last] = nil
	*h = s[:last]
	if i != last { // the last entry fills the hole, and moves to its place
		if !h.down(i, moved) {
			h.up(i, moved)
		}
	}
	e.pos = 0
	return e
}

// up puts e, due no later than the entries below index i, at i or above.
func (h dueHeap) up(i int, e *hedgeDue) {
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= e.at {
			break
		}
		h.set(i, h[parent])
		i = parent
	}
	h.set(i, e)
}

// down puts e, due no earlier than the entries above index i, at i or
// below, and reports whether it went below.
func (h dueHeap) down(i int, e *hedgeDue) bool {
	from := i
	for {
		child := 2*i + 1
		if child >= len(h) {
			break
		}
		if right := child + 1; right < len(h) && h[right].at < h[child].at {
			child = right
		}
		if h[child].at >= e.at {
			break
		}
		h.set(i, h[child])
		i = child
	}
	h.set(i, e)
	return i > from
}

// set puts e at index i.
func (h dueHeap) set(i int, e *hedgeDue) {
	h[i], e.pos = e, i+1
}
