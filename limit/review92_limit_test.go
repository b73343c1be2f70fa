package limit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"go.uber.org/goleak"
)

// Many goroutines; callers cancel while queued and in flight; some attempts
// panic or call runtime.Goexit (released by defer). The number holding a
// slot never exceeds the limit; every slot comes back exactly once.
func TestReview92_FixedNeverOverLimit(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mk := range []func() *Limiter{
		func() *Limiter { return NewFixed(4, MaxWaiting(16)) },
		func() *Limiter { return NewFixed(4, MaxWaiting(16), OldestOnTime()) },
		func() *Limiter { return NewAIMD(Initial(4), Min(1), Max(8), MaxWaiting(16)) },
	} {
		l := mk()
		var cur, peak, over atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 300 {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(4) == 0 {
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
					}
					if rng.IntN(5) == 0 {
						go cancel()
					}
					tk, err := l.Acquire(ctx)
					if err != nil {
						if !errors.Is(err, ErrLimited) {
							t.Errorf("err %v", err)
						}
						if c, _ := resilience.ClassOf(err); c != resilience.ClassRejected {
							t.Errorf("class %v", c)
						}
						cancel()
						continue
					}
					lim := int64(l.Limit())
					n := cur.Add(1)
					if n > lim && !l.adaptive {
						over.Add(1)
					}
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					mode := rng.IntN(6)
					var outcome error
					switch rng.IntN(3) {
					case 0:
						outcome = errors.New("503")
					case 1:
						outcome = context.Canceled
					}
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { recover() }()
						defer func() { cur.Add(-1); l.Release(tk, outcome) }()
						switch mode {
						case 0:
							panic("boom")
						case 1:
							runtime.Goexit()
						default:
							if rng.IntN(3) == 0 {
								runtime.Gosched()
							}
						}
					}()
					<-done
					cancel()
				}
			}()
		}
		wg.Wait()
		if over.Load() != 0 {
			t.Errorf("in flight over a fixed limit %d times", over.Load())
		}
		if peak.Load() > int64(8) {
			t.Errorf("peak %d over max 8", peak.Load())
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Errorf("after: inFlight %d waiting %d", l.InFlight(), l.Waiting())
		}
		// every slot given back: a fresh burst gets exactly Limit slots
		lim := l.Limit()
		var tks []Ticket
		for range lim {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatalf("slot lost: %v (limit %d, got %d)", err, lim, len(tks))
			}
			tks = append(tks, tk)
		}
		dead, c := context.WithCancel(context.Background())
		c()
		if _, err := l.Acquire(dead); !l.adaptive && !errors.Is(err, ErrLimited) {
			t.Errorf("over limit admitted")
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
	}
}

// AIMD with extreme options: whatever the outcomes, Min <= limit <= Max,
// never 0, never NaN.
func TestReview92_AIMDBounds(t *testing.T) {
	cfgs := []struct {
		name          string
		ini, min, max int
		b             float64
	}{
		{"ones", 1, 1, 1, 0.5},
		{"maxint", math.MaxInt, math.MaxInt, math.MaxInt, 0.5},
		{"iniMax", math.MaxInt, 1, math.MaxInt, 0.5},
		{"nearOne", 1, 1, math.MaxInt, math.Nextafter(1, 0)},
		{"half", 2, 1, 3, 0.5},
		{"wide", 1 << 40, 1, 1 << 62, 0.9},
	}
	for _, cf := range cfgs {
		l := NewAIMD(Initial(cf.ini), Min(cf.min), Max(cf.max), Backoff(cf.b))
		rng := rand.New(rand.NewPCG(1, 2))
		var held []Ticket
		errs := []error{nil, errors.New("x"), context.Canceled, ErrLimited, resilience.Permanent(errors.New("p")), resilience.Terminal(errors.New("t"))}
		for i := range 200000 {
			if rng.IntN(2) == 0 && len(held) < 5000 {
				tk, err := l.Acquire(context.Background())
				if err == nil {
					held = append(held, tk)
				}
			} else if len(held) > 0 {
				j := rng.IntN(len(held))
				l.Release(held[j], errs[rng.IntN(len(errs))])
				held = slices_delete(held, j)
			}
			l.mu.Lock()
			lim := l.limit
			l.mu.Unlock()
			if math.IsNaN(lim) || lim < float64(cf.min) || lim > float64(cf.max) || l.Limit() < 1 {
				t.Fatalf("%s: step %d limit %v out of [%d,%d]", cf.name, i, lim, cf.min, cf.max)
			}
			if l.InFlight() > len(held) {
				t.Fatalf("%s: inflight %d > held %d", cf.name, l.InFlight(), len(held))
			}
		}
	}
}

func slices_delete(s []Ticket, i int) []Ticket {
	s[i] = s[len(s)-1]
	return s[:len(s)-1]
}

// AIMD moves as documented: slow start by one an attempt while in use;
// a burst of failures of one round costs one step; after a failure, one
// over the limit an attempt until doubled.
func TestReview92_AIMDMoves(t *testing.T) {
	l := NewAIMD(Initial(10), Min(1), Max(100), Backoff(0.5))
	var tks []Ticket
	for range 10 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	// slow start: each success while in use adds one.
	l.Release(tks[0], nil) // inFlight 10 *2 >= 10 -> 11
	if got := l.Limit(); got != 11 {
		t.Fatalf("slow start: %d, want 11", got)
	}
	// a burst of failures of the same round: one decrease
	for _, tk := range tks[1:6] {
		l.Release(tk, errors.New("503"))
	}
	if got := l.Limit(); got != 6 { // 11*0.5 = 5.5: 6 let in
		t.Fatalf("after a burst: %d, want 6", got)
	}
	// not in use (inFlight 4 of 5.5 -> 8 >= 5.5 in use, still): release remaining
	for _, tk := range tks[6:] {
		l.Release(tk, nil)
	}
	l.mu.Lock()
	lim := l.limit
	l.mu.Unlock()
	// careful = 11: additive 1/limit per success
	if lim < 5.5 || lim > 5.5+4.0/5.5+0.01 {
		t.Fatalf("congestion avoidance moved too much: %v", lim)
	}
	// idle: a success with nothing else in flight (1*2 < 5.5) does not raise
	tk, _ := l.Acquire(context.Background())
	l.Release(tk, nil)
	l.mu.Lock()
	lim2 := l.limit
	l.mu.Unlock()
	if lim2 != lim {
		t.Fatalf("grew while not in use: %v -> %v", lim, lim2)
	}
	// a failure of a new round after the decrease does decrease again
	tk, _ = l.Acquire(context.Background())
	l.Release(tk, errors.New("503"))
	if got := l.Limit(); got != int(math.Ceil(lim2*0.5)) && got != 1 {
		t.Fatalf("second congestion: %d", got)
	}
	// cannot go below Min
	for range 100 {
		tk, _ = l.Acquire(context.Background())
		l.Release(tk, errors.New("503"))
	}
	if got := l.Limit(); got != 1 {
		t.Fatalf("floor: %d", got)
	}
	// caller canceled and rejected teach nothing
	tk, _ = l.Acquire(context.Background())
	l.Release(tk, context.Canceled)
	tk, _ = l.Acquire(context.Background())
	l.Release(tk, ErrLimited)
	if got := l.Limit(); got != 1 {
		t.Fatalf("learned from cancel/reject: %d", got)
	}
}

// Queued callers honour their context (synctest): a queued waiter whose
// deadline passes leaves at its deadline, with ErrLimited, and its slot
// is not lost when it is granted as it leaves.
func TestReview92_QueuedHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewFixed(1, MaxWaiting(3))
		tk, _ := l.Acquire(context.Background())
		var wg sync.WaitGroup
		res := make([]time.Duration, 3)
		errs := make([]error, 3)
		start := time.Now()
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i+1)*time.Second)
				defer cancel()
				_, errs[i] = l.Acquire(ctx)
				res[i] = time.Since(start)
			}()
		}
		synctest.Wait()
		if l.Waiting() != 3 {
			t.Fatalf("waiting %d", l.Waiting())
		}
		// a fourth is refused at once
		if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrLimited) {
			t.Fatalf("4th: %v", err)
		}
		wg.Wait()
		for i := range 3 {
			if !errors.Is(errs[i], ErrLimited) || res[i] != time.Duration(i+1)*time.Second {
				t.Errorf("waiter %d: %v after %v", i, errs[i], res[i])
			}
		}
		l.Release(tk, nil)
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Fatalf("inflight %d waiting %d", l.InFlight(), l.Waiting())
		}
	})
}

// A granted waiter whose ctx ends at the same instant: its slot goes on to
// the next waiter, never lost, never doubled.
func TestReview92_GrantAsCancel(t *testing.T) {
	for i := range 3000 {
		l := NewFixed(1, MaxWaiting(2))
		tk, _ := l.Acquire(context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		type r struct {
			tk  Ticket
			err error
		}
		got := make(chan r, 2)
		go func() { tk, err := l.Acquire(ctx); got <- r{tk, err} }()
		for l.Waiting() != 1 {
			runtime.Gosched()
		}
		go func() { tk, err := l.Acquire(context.Background()); got <- r{tk, err} }()
		for l.Waiting() != 2 {
			runtime.Gosched()
		}
		go cancel()
		l.Release(tk, nil)
		for range 2 {
			select {
			case x := <-got:
				if x.err == nil {
					if n := l.InFlight(); n != 1 {
						t.Fatalf("iter %d: inflight %d with one holder", i, n)
					}
					l.Release(x.tk, nil)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("iter %d: slot lost: a waiter hangs (inflight %d waiting %d)", i, l.InFlight(), l.Waiting())
			}
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Fatalf("iter %d: after %d %d", i, l.InFlight(), l.Waiting())
		}
	}
}
