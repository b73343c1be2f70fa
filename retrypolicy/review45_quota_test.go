package retrypolicy

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	windowpkg "github.com/resiliencekit/resiliencekit/internal/window"
)

// Thousands of goroutines take from a quota at one instant: never more
// than the bucket's share (a tenth of the window's allowance, at least
// one), nor than the window's allowance.
func TestReview45QuotaConcurrentNeverOver(t *testing.T) {
	for _, c := range []struct {
		ratio, floor float64
		calls        int
	}{{0.1, 0, 1000}, {0.1, 0, 5}, {0, 1, 0}, {0.2, 0.5, 333}, {1, 0, 10000}, {0, 0.05, 0}, {0.01, 0, 50}} {
		synctest.Test(t, func(t *testing.T) {
			q := NewQuota(c.ratio, c.floor, 10*time.Second)
			for range c.calls {
				q.deposit()
			}
			inWindow := math.Floor(c.ratio*float64(c.calls) + c.floor*10)
			want := int(min(inWindow, max(math.Floor(inWindow/10), 1)))
			if got := q.Available(); got != want {
				t.Errorf("%+v: Available %d, want %d", c, got, want)
			}
			var took atomic.Int64
			var wg sync.WaitGroup
			for range 4000 {
				wg.Go(func() {
					if q.Take() {
						took.Add(1)
					}
				})
			}
			wg.Wait()
			if int(took.Load()) != want {
				t.Errorf("%+v: took %d, want exactly %d", c, took.Load(), want)
			}
		})
	}
}

// Over time, with steady demand: the retries in every window of 10
// buckets never exceed the window's allowance, and each bucket's at most
// its share; the floor alone lets a quiet service retry.
func TestReview45QuotaOverTimeFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// floor 0.7/s over 10 s: 7 a window, at most 1 a bucket (of 1 s).
		q := NewQuota(0, 0.7, 10*time.Second)
		per := map[int64]int{}
		start := time.Now()
		for range 60000 { // 60 s in steps of 1 ms, 8 goroutines each step
			var wg sync.WaitGroup
			var n atomic.Int64
			for range 8 {
				wg.Go(func() {
					if q.Take() {
						n.Add(1)
					}
				})
			}
			wg.Wait()
			per[int64(time.Since(start)/time.Second)] += int(n.Load())
			time.Sleep(time.Millisecond)
		}
		total := 0
		for b := int64(0); b < 60; b++ {
			if per[b] > 1 {
				t.Errorf("bucket %d: %d retries, share 1", b, per[b])
			}
			total += per[b]
			if b >= 9 {
				s := 0
				for k := b - 9; k <= b; k++ {
					s += per[k]
				}
				if s > 7 {
					t.Errorf("window ending %d: %d retries, allowance 7", b, s)
				}
			}
		}
		if total < 40 { // 7 per 10 s over 60 s: 42
			t.Errorf("floor let only %d retries in 60 s", total)
		}
	})
}

// At a bucket boundary in real time: a goroutine that read the clock just
// before it checks the window ending at bucket e and counts in slot e; one
// just after checks the window ending at e+1 and counts in slot e+1. Only
// each slot's own count is compare-and-swapped, so both can pass on the
// same last retry of the window e+1. Setup: allowance 2 a window of 10 ms
// (1 ms buckets), one retry taken in bucket 4, then two goroutines race
// Take across the 9/10 boundary. The window of buckets 1..10 must hold at
// most 2.
func TestReview45QuotaBoundaryRace(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs 2 CPUs")
	}
	const trials = 600 // 11 ms each: 7 s
	over := 0
	for trial := range trials {
		t0 := time.Now()
		q := NewQuota(0, 200, 10*time.Millisecond) // 2 a window, 1 a bucket
		start := t0.Add(time.Since(t0) / 2)        // the clock's start, within a fraction of a µs
		bucket := q.clock.Bucket()
		until := func(d time.Duration) {
			for time.Since(start) < d {
			}
		}
		until(4*bucket + bucket/2)
		if !q.Take() {
			t.Fatal("seed refused")
		}
		lead := time.Duration(trial%30) * 40 * time.Nanosecond // 0 to 1.2 µs before the boundary
		var wg sync.WaitGroup
		var ready atomic.Int32
		for range 2 {
			wg.Go(func() {
				ready.Add(1)
				for ready.Load() < 2 {
				}
				until(10*bucket - lead)
				for time.Since(start) < 10*bucket+bucket/2 {
					q.Take()
				}
			})
		}
		wg.Wait()
		if time.Since(start) >= 11*bucket {
			continue // the trial ran late: the ring no longer tells
		}
		// Retries per bucket tag, from the ring.
		s := 0
		var tags []int64
		for i := range q.retries {
			w := q.retries[i].Load()
			tag := int64(w >> 32)
			if tag >= 1 && tag <= 10 {
				s += int(w & (1<<32 - 1))
				for range w & (1<<32 - 1) {
					tags = append(tags, tag)
				}
			}
		}
		if s > 2 {
			over++
			if over <= 3 {
				t.Logf("trial %d (lead %v): %d retries in the window of buckets 1..10 (buckets %v), allowance 2", trial, lead, s, tags)
			}
		}
	}
	if over > 0 {
		t.Errorf("the quota allowed more than its window's allowance in %d of %d trials", over, trials)
	}
}

// A retry charged to the quota but never made: the caller cancels during
// the backoff. The quota gives the charge back (other calls keep that
// retry).
func TestReview45QuotaChargedForRetryNotMade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0, 1, 10*time.Second) // 10 a window, 1 a bucket
		ctx, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		n := 0
		_, err := Do(ctx, New(WithQuota(q), BaseDelay(time.Second), Jitter(None)), func(context.Context) (int, error) { n++; return 0, errors.New("blip") })
		if !errors.Is(err, context.Canceled) || n != 1 {
			t.Fatalf("%v %d", err, n)
		}
		if a := q.Available(); a != 1 {
			t.Errorf("a retry canceled before it was sent still holds its charge: Available %d, want 1", a)
		}
	})
}

var _ = windowpkg.Buckets
