package hedge

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/window"
)

// r156Traffic runs, in fake time, calls at the given offsets within each
// second for secs seconds; every want-th call asks for a hedge delay
// after it starts. It returns the hedges asked for and taken over the
// seconds after the first ten (the window is full then).
func r156Traffic(t *testing.T, p *Policy, t0 time.Time, offsets []time.Duration, want int, delay time.Duration, secs int) (asked, taken int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	// Align to the policy's seconds.
	time.Sleep(time.Second - time.Since(t0)%time.Second)
	n := 0
	for s := range secs {
		sec := time.Now()
		for _, off := range offsets {
			time.Sleep(off - time.Since(sec))
			p.Called()
			n++
			if n%want != 0 {
				continue
			}
			counted := s >= 10
			wg.Go(func() {
				time.Sleep(delay)
				ok := p.Take()
				if counted {
					mu.Lock()
					asked++
					if ok {
						taken++
					}
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Second - time.Since(sec))
	}
	wg.Wait()
	return asked, taken
}

// (2) Steady traffic gets its 10%: calls spread evenly over each second.
func TestReview156SteadyEven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		p := New(Delay(time.Millisecond))
		var offs []time.Duration
		for i := range 20 {
			offs = append(offs, time.Duration(i)*50*time.Millisecond)
		}
		asked, taken := r156Traffic(t, p, t0, offs, 10, 300*time.Millisecond, 40)
		if taken < asked {
			t.Errorf("even steady traffic at 10%%: %d of %d hedges taken", taken, asked)
		}
	})
}

// (2) Steady traffic, few calls a second: 2 a second, one hedge in ten.
func TestReview156SteadyFew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		p := New(Delay(time.Millisecond))
		asked, taken := r156Traffic(t, p, t0, []time.Duration{200 * time.Millisecond, 900 * time.Millisecond}, 10, 300*time.Millisecond, 60)
		if taken < asked {
			t.Errorf("2 calls a second at 10%%: %d of %d hedges taken", taken, asked)
		}
	})
}

// (2) MaxShare 1, every call hedged once, calls late in each second so
// that their hedges are due just after the second's edge.
func TestReview156ShareOneLateCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		p := New(Delay(time.Millisecond), MaxShare(1))
		asked, taken := r156Traffic(t, p, t0, []time.Duration{850 * time.Millisecond, 900 * time.Millisecond, 950 * time.Millisecond}, 1, 200*time.Millisecond, 30)
		if taken < asked {
			t.Errorf("MaxShare 1, 3 calls a second, each hedged once: %d of %d hedges taken", taken, asked)
		}
	})
}

// (2) Steady traffic that comes in a burst late in each second (a
// periodic job: 50 calls at .85 s), 10% of them slow: their hedges are
// due 200 ms later, just past the second's edge, before that second has
// any call. Every second is like the one before: steady, at exactly 10%.
func TestReview156SteadyLateBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		p := New(Delay(time.Millisecond))
		offs := make([]time.Duration, 50)
		for i := range offs {
			offs[i] = 850 * time.Millisecond
		}
		asked, taken := r156Traffic(t, p, t0, offs, 10, 200*time.Millisecond, 30)
		if taken*10 < asked*9 {
			t.Errorf("steady bursts at .85 s, hedges 10%% due at .05 s of the next second: %d of %d hedges taken", taken, asked)
		}
	})
}

// (2) The documented lone call at 10% gets 2 hedges (MaxExtra 2), also
// when they fall on either side of a second's edge.
func TestReview156LoneCallAcrossEdge(t *testing.T) {
	for _, at := range []time.Duration{100 * time.Millisecond, 950 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			t0 := time.Now()
			p := New(Delay(time.Millisecond), MaxExtra(2))
			time.Sleep(30*time.Second + at - time.Since(t0)%time.Second) // idle, then one call
			p.Called()
			time.Sleep(100 * time.Millisecond)
			a := p.Take()
			time.Sleep(100 * time.Millisecond)
			b := p.Take()
			if !a || !b {
				t.Errorf("lone call at .%03d s: hedges taken %v %v, the doc's example says 2", at/time.Millisecond, a, b)
			}
		})
	}
}

// (2) The bound: over every span of one to ten whole seconds, hedges <
// share * calls + 2, with bursty random traffic (sequential).
func TestReview156BoundEverySpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		p := New(Delay(time.Millisecond))
		const secs = 60
		var calls, hedges [secs]int
		seed := uint64(7)
		rnd := func(n uint64) uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return (seed >> 33) % n }
		for range 6000 {
			time.Sleep(time.Duration(rnd(20)) * time.Millisecond)
			if rnd(100) < 3 { // a lull
				time.Sleep(time.Duration(rnd(4000)) * time.Millisecond)
			}
			s := int(time.Since(base) / time.Second)
			if s >= secs {
				break
			}
			if rnd(3) == 0 {
				p.Called()
				calls[s]++
			} else if p.Take() {
				hedges[s]++
			}
		}
		for i := range secs {
			for k := 1; k <= 10 && i+k <= secs; k++ {
				var c, h int
				for j := i; j < i+k; j++ {
					c, h = c+calls[j], h+hedges[j]
				}
				if float64(h) >= 0.1*float64(c)+2 {
					t.Errorf("seconds %d..%d: %d hedges for %d calls", i, i+k-1, h, c)
				}
			}
		}
	})
}

// (2) Concurrent Take at the edge of a bucket, real time, with buckets of
// 5 ms so that many edges go by: with no calls, no span of ten buckets
// may hold two hedges ("Concurrent calls never take more than it
// allows").
func TestReview156ConcurrentTakeAtEdges(t *testing.T) {
	p := New(Delay(time.Millisecond))
	p.clock = window.NewClock(50 * time.Millisecond)
	stop := time.Now().Add(1500 * time.Millisecond)
	var worst atomic.Uint64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if p.Take() {
					if s := p.hedges.Sum(p.clock.Now(&p.calls)); s > worst.Load() {
						worst.Store(s)
					}
				}
			}
		})
	}
	wg.Wait()
	if worst.Load() > 1 {
		t.Errorf("%d hedges within ten buckets, with no calls: the bound is 1", worst.Load())
	}
}
