package throttle_test

import (
	"container/heap"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

var r100Fail = errors.New("503")

// r100Ev is one event of the simulation: a worker's next attempt, or the
// answer to an attempt it sent.
type r100Ev struct {
	at     time.Duration
	worker int
	answer bool
	tk     throttle.Ticket
	err    error
}

type r100Heap []r100Ev

func (h r100Heap) Len() int           { return len(h) }
func (h r100Heap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h r100Heap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *r100Heap) Push(x any)        { *h = append(*h, x.(r100Ev)) }
func (h *r100Heap) Pop() any          { o := *h; n := len(o); x := o[n-1]; *h = o[:n-1]; return x }

// r100Dep decides an attempt's outcome as it is sent, given the time and
// the attempts sent over the last second (its load).
type r100Dep func(now time.Duration, load float64) error

// r100Sim runs workers against a throttle in virtual time (call it inside
// synctest.Test): each worker calls, and on a refusal calls again after
// refuseGap; after an answer, after pause. Latency is the answer time.
// stats are kept per bucket of statBucket.
type r100Sim struct {
	th         *throttle.Throttle
	workers    int
	refuseGap  time.Duration
	pause      time.Duration
	latency    func() time.Duration
	dep        r100Dep
	statBucket time.Duration
	failLat    time.Duration // if set: the answer time of a failure (a timeout)
	open       time.Duration // if set: one attempt every open, whatever the answers (workers ignored)
	// per stat bucket
	sent, refused, accepted []int
	lastRefused             time.Duration
	loadWin                 []time.Duration // send times within the last second
}

func (s *r100Sim) stat(now time.Duration) int {
	i := int(now / s.statBucket)
	for len(s.sent) <= i {
		s.sent = append(s.sent, 0)
		s.refused = append(s.refused, 0)
		s.accepted = append(s.accepted, 0)
	}
	return i
}

func (s *r100Sim) load(now time.Duration) float64 {
	j := 0
	for j < len(s.loadWin) && s.loadWin[j] <= now-time.Second {
		j++
	}
	s.loadWin = s.loadWin[j:]
	return float64(len(s.loadWin))
}

func (s *r100Sim) run(d time.Duration) {
	start := time.Now()
	h := &r100Heap{}
	if s.open > 0 {
		heap.Push(h, r100Ev{worker: -1})
	} else {
		for w := range s.workers {
			heap.Push(h, r100Ev{at: time.Duration(w) * time.Microsecond, worker: w})
		}
	}
	lat := s.latency
	if lat == nil {
		lat = func() time.Duration { return 5 * time.Millisecond }
	}
	for h.Len() > 0 {
		ev := heap.Pop(h).(r100Ev)
		if ev.at > d {
			break
		}
		if dt := ev.at - time.Since(start); dt > 0 {
			time.Sleep(dt)
		}
		now := ev.at
		i := s.stat(now)
		if ev.answer {
			s.th.Done(ev.tk, ev.err)
			if ev.err == nil {
				s.accepted[i]++
			}
			if ev.worker < 0 {
				continue
			}
			heap.Push(h, r100Ev{at: now + s.pause, worker: ev.worker})
			continue
		}
		if ev.worker < 0 {
			heap.Push(h, r100Ev{at: now + s.open, worker: -1})
		}
		tk, err := s.th.Admit()
		if err != nil && ev.worker < 0 {
			s.refused[i]++
			s.lastRefused = now
			continue
		}
		if err != nil {
			s.refused[i]++
			s.lastRefused = now
			heap.Push(h, r100Ev{at: now + s.refuseGap, worker: ev.worker})
			continue
		}
		s.sent[i]++
		s.loadWin = append(s.loadWin, now)
		out := s.dep(now, s.load(now))
		l := lat()
		if out != nil && s.failLat > 0 {
			l = s.failLat
		}
		heap.Push(h, r100Ev{at: now + l, worker: ev.worker, answer: true, tk: tk, err: out})
	}
}

func r100Sum(xs []int, from, to int) int {
	n := 0
	for i := from; i < to && i < len(xs); i++ {
		n += xs[i]
	}
	return n
}

// r100Random fails with probability f.
func r100Random(f float64) error {
	if rand.Float64() < f {
		return r100Fail
	}
	return nil
}
