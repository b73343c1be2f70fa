package limit

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// review123Check checks l's invariants against held, the slots its
// users hold: each heir linked to the extra it claimed and counted, no
// extra claimed twice, the slots in flight those held, and no waiter
// queued beside a free slot.
func review123Check(t *testing.T, l *Limiter, held int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	h := 0
	for _, q := range [][]*waiter{l.queue, l.late} {
		for _, w := range q {
			if w.from != nil {
				h++
				if w.from.heir != w {
					t.Fatalf("heir link broken")
				}
			}
		}
	}
	if h != l.heirs {
		t.Fatalf("heirs=%d, counted %d", l.heirs, h)
	}
	claimed := map[*waiter]bool{}
	for _, e := range l.extras {
		if e.heir != nil {
			if claimed[e.heir] {
				t.Fatalf("extra claimed twice")
			}
			claimed[e.heir] = true
		}
	}
	if l.inFlight != held {
		t.Fatalf("inFlight=%d, held=%d", l.inFlight, held)
	}
	if float64(l.inFlight) < l.limit && len(l.queue)+len(l.late) > 0 {
		t.Fatalf("waiters stuck: inFlight=%d limit=%v waiting=%d", l.inFlight, l.limit, len(l.queue)+len(l.late))
	}
}

// Random schedules of attempts (Acquire) and hedges (AcquireExtra) in
// fixed and AIMD limits, queues and MaxWaiting of 0 to 2, hedges slow to
// heed their stop: the invariants hold before every arrival, and nothing
// is left once all are over.
func TestReview123RandomHeirs(t *testing.T) {
	stops := 0
	defer func() { t.Logf("stops=%d", stops) }()
	for seed := range uint64(2000) {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			var opts []Option
			opts = append(opts, MaxWaiting(r.IntN(3)))
			if r.IntN(2) == 0 {
				opts = append(opts, OldestOnTime())
			}
			var l *Limiter
			adaptive := r.IntN(2) == 0
			if adaptive {
				l = NewAIMD(append(opts, Initial(4+r.IntN(5)), Min(1), Max(12), Backoff(0.5))...)
			} else {
				l = NewFixed(4+r.IntN(5), opts...)
			}
			var mu sync.Mutex
			held := 0
			var rmu sync.Mutex
			rnd := func(n int) int { rmu.Lock(); defer rmu.Unlock(); return r.IntN(n) }
			var wg sync.WaitGroup
			fail := context.DeadlineExceeded
			errFor := func() error {
				if adaptive && rnd(4) == 0 {
					return fail
				}
				return nil
			}
			gap := 1 + rnd(12)
			for i := 0; i < 150; i++ {
				time.Sleep(time.Duration(rnd(gap)) * time.Millisecond)
				synctest.Wait()
				mu.Lock()
				h := held
				mu.Unlock()
				review123Check(t, l, h)
				wg.Add(1)
				if rnd(3) == 0 {
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						tk, err := l.AcquireExtra(func() { stops++; cancel() })
						if err != nil {
							return
						}
						mu.Lock()
						held++
						mu.Unlock()
						d := time.Duration(rnd(100)) * time.Millisecond
						select {
						case <-time.After(d):
						case <-ctx.Done():
							time.Sleep(time.Duration(rnd(20)) * time.Millisecond)
						}
						mu.Lock()
						held--
						mu.Unlock()
						l.Release(tk, errFor())
					}()
					continue
				}
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rnd(150))*time.Millisecond)
					defer cancel()
					tk, err := l.Acquire(ctx)
					if err != nil {
						return
					}
					mu.Lock()
					held++
					mu.Unlock()
					time.Sleep(time.Duration(rnd(80)) * time.Millisecond)
					mu.Lock()
					held--
					mu.Unlock()
					l.Release(tk, errFor())
				}()
			}
			wg.Wait()
			review123Check(t, l, 0)
			if l.heirs != 0 || len(l.extras) != 0 || len(l.queue) != 0 {
				t.Fatalf("left: heirs=%d extras=%d queue=%d", l.heirs, len(l.extras), len(l.queue))
			}
		})
	}
}
