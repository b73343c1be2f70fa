package pipeline

import (
	"container/heap"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// hedgeTimers is one timer for the hedging delays of every race of a
// pipeline: a race waiting for its next hedge is in a heap by when it is
// due, and the timer is set for the first of them. A race that is armed
// and then answers before its hedge is due, as nearly every race does,
// costs a push and a removal under a lock, and no timer, func or goroutine
// of its own; the timer is set again only when a race comes due before it
// fires (with a fixed delay, only once it has fired). It is safe for
// concurrent use.
type hedgeTimers struct {
	mu    sync.Mutex
	due   dueHeap
	timer *time.Timer      // made on first use
	at    monotime.Reading // when the timer fires, while set
	set   bool
	clock func() monotime.Reading // nil: monotime.Now; a test's own, never a pipeline's, whose first attempts time their latencies from a reading of it (race.arm)
}

// now reads t's clock.
func (t *hedgeTimers) now() monotime.Reading {
	if t.clock != nil {
		return t.clock()
	}
	return monotime.Now()
}

// hedgeDue is a race's place in the heap; the race keeps it.
type hedgeDue struct {
	at   monotime.Reading
	race interface{ fire() } // a pointer: no allocation
	pos  int32               // index in the heap + 1; 0 when not in it (int32: a race stays within a spare's size)
	// sent counts the attempts the race sent, under its lock once the
	// timer has e; its fire, which sends a hedge, adds e again after it,
	// so while e is in the heap it does not change.
	sent int32
}

// add puts e in the heap, due d from now, and reports true; or, in a
// testing/synctest bubble, reports false and leaves e to a timer of its
// race's own. A bubble's clock starts in 2000, before the process began,
// so a reading there is negative; and a timer made in one bubble, or
// outside, must not be used from another, or outside, which one timer for
// a pipeline shared by tests would be.
func (t *hedgeTimers) add(e *hedgeDue, d time.Duration) bool { return t.addAt(e, t.now(), d) }

// addAt is add, with t's clock read at now.
func (t *hedgeTimers) addAt(e *hedgeDue, now monotime.Reading, d time.Duration) bool {
	if now < 0 {
		return false
	}
	e.at = now.Add(d)
	t.mu.Lock()
	defer t.mu.Unlock()
	heap.Push(&t.due, e)
	if !t.set || e.at < t.at {
		t.reset(now)
	}
	return true
}

// remove takes e out of the heap, if it is there. The timer is left set:
// stopping it and setting it again for the next race would cost two
// operations on the runtime's timers per call; left set, it fires at most
// once a hedging delay for races that answered, finds none due, and is set
// again only if a race waits.
func (t *hedgeTimers) remove(e *hedgeDue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.pos != 0 {
		heap.Remove(&t.due, int(e.pos-1))
	}
}

// disarm takes e out of the heap if its race has sent only its first
// attempt, and reports whether it did: the race then sends no hedge, as
// the timer will not fire it, and no other goroutine has seen its call.
// Out of the heap, e may be firing; a race that sent a hedge must wait
// for it.
func (t *hedgeTimers) disarm(e *hedgeDue) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.pos == 0 || e.sent != 1 {
		return false
	}
	heap.Remove(&t.due, int(e.pos-1))
	return true
}

// reset sets the timer for the first race due; t.mu is held.
func (t *hedgeTimers) reset(now monotime.Reading) {
	if len(t.due) == 0 {
		return
	}
	t.at, t.set = t.due[0].at, true
	d := time.Duration(t.at - now)
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.expire)
	} else {
		t.timer.Reset(d)
	}
}

// expire fires every race due, on the timer's goroutine, and sets the
// timer for the next.
func (t *hedgeTimers) expire() {
	t.mu.Lock()
	t.set = false
	now := t.now()
	var fire []interface{ fire() }
	for len(t.due) > 0 && t.due[0].at <= now {
		fire = append(fire, heap.Pop(&t.due).(*hedgeDue).race)
	}
	t.reset(now)
	t.mu.Unlock()
	for _, r := range fire {
		r.fire() // takes the race's lock, and may add it again
	}
}

// dueHeap orders races by when their next hedge is due.
type dueHeap []*hedgeDue

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = int32(i+1), int32(j+1)
}
func (h *dueHeap) Push(x any) {
	e := x.(*hedgeDue)
	*h = append(*h, e)
	e.pos = int32(len(*h))
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.pos = 0
	return e
}
