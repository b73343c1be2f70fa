package pipeline

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// r154Race is a race as the timer sees it.
type r154Race struct {
	t        *hedgeTimers
	mu       sync.Mutex
	due      hedgeDue
	delay    time.Duration
	armed    time.Time
	fires    []time.Time
	again    int  // times to re-add itself, as a race with MaxExtra
	removed  bool // taken off before it was due
	disarmed bool // taken off before the timer had it
}

func (r *r154Race) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.fires = append(r.fires, now)
	if r.removed {
		return
	}
	r.due.sent++ // as race.fire: a race that sent a hedge is not disarmed
	if r.again > 0 {
		r.again--
		r.armed = now
		r.t.add(&r.due, r.delay)
	}
}

// (3) The pipeline's one timer with thousands of races of different
// delays in flight, half of them taken off early: none fires early or
// twice per arming, none taken off fires, and the heap ends empty.
func TestReview154TimerManyDelays(t *testing.T) {
	ht := new(hedgeTimers)
	rng := rand.New(rand.NewPCG(1, 54))
	const n = 3000
	races := make([]*r154Race, n)
	var wg sync.WaitGroup
	var idx atomic.Int32
	for range 8 {
		wg.Go(func() {
			for {
				i := int(idx.Add(1) - 1)
				if i >= n {
					return
				}
				r := &r154Race{t: ht, delay: time.Duration(1+i%97) * 500 * time.Microsecond}
				if i%7 == 0 {
					r.again = 2
				}
				r.due.race = r
				r.due.sent = 1
				races[i] = r
				r.mu.Lock()
				r.armed = time.Now()
				ht.add(&r.due, r.delay)
				r.mu.Unlock()
				if i%2 == 0 {
					// answers before its delay, as nearly every race does
					time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
					r.mu.Lock()
					if ht.disarm(&r.due) {
						r.removed, r.disarmed = true, true
					} else {
						r.removed = true // fired meanwhile: a stop as race.stop
						ht.remove(&r.due)
					}
					r.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	_ = rng
	time.Sleep(300 * time.Millisecond)
	early, late, missing, extra := 0, 0, 0, 0
	var worst time.Duration
	for _, r := range races {
		r.mu.Lock()
		want := 1 + 2*btoi(r.due.sent == 1 && r.again == 0 && len(r.fires) == 3)
		_ = want
		if !r.removed {
			if len(r.fires) == 0 {
				missing++
			}
			if r.again != 0 {
				missing++
			}
		}
		if len(r.fires) > 3 || r.disarmed && len(r.fires) > 0 {
			extra++
		}
		r.mu.Unlock()
	}
	// Lateness and earliness of single-shot races that were never removed.
	for i, r := range races {
		if r.removed || i%7 == 0 || len(r.fires) == 0 {
			continue
		}
		d := r.fires[0].Sub(r.armed)
		if d < r.delay {
			early++
		}
		if d-r.delay > worst {
			worst = d - r.delay
		}
		if d-r.delay > 100*time.Millisecond {
			late++
		}
	}
	t.Logf("worst lateness %v", worst)
	if early > 0 || late > 0 || missing > 0 || extra > 0 {
		t.Errorf("early %d, late (>100ms) %d, missing %d, extra fires %d", early, late, missing, extra)
	}
	ht.mu.Lock()
	left := len(ht.due)
	ht.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries left in the heap", left)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
