package idempotency

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// (b) in real time: a store failing for a while, then back; many guards
// on it; once it answers, no goroutine is left (the asks end, the
// renewals and saves end).
func TestReview151NoLeakAfterProbing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newR151Store()
	var gs []*Guard
	for range 50 {
		gs = append(gs, r151Guard(s, nil, FailOpenAfter(time.Second), StoreTimeout(100*time.Millisecond), Lease(time.Second)))
	}
	s.mode.Store(r151Hang)
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { r151Run(t, g, fmt.Sprint("a", i)) })
	}
	wg.Wait()
	// FailOpenAfter is 1 s; 1.5 s more for a loaded 2-core machine (ci162:
	// 1.5 s in all was not enough for 50 guards there).
	time.Sleep(2500 * time.Millisecond)
	for i, g := range gs {
		if ran, _, err := r151Run(t, g, fmt.Sprint("b", i)); !ran {
			t.Errorf("guard %d not failed open after 2.5 s of a hanging store: %v", i, err)
		}
	}
	s.mode.Store(r151Healthy)
	for range 4 {
		for i, g := range gs {
			r151Run(t, g, fmt.Sprint("c", i, time.Now().UnixNano()))
		}
		time.Sleep(1100 * time.Millisecond)
	}
	for i, g := range gs {
		if g.out.isOpen() || g.asking.Load() {
			t.Errorf("guard %d: open %v asking %v after the store came back", i, g.out.isOpen(), g.asking.Load())
		}
	}
	time.Sleep(2 * time.Second) // the reaper's timers of the orphans end
}
