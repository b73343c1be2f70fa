package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// review46Store wraps a MemoryStore: Begin may be slowed, made to panic,
// call runtime.Goexit, or hang until its context ends.
type review46Store struct {
	*idempotency.MemoryStore
	delay   time.Duration
	mode    atomic.Value // string: "", "panic", "goexit", "hang", "fail"
	begins  atomic.Int32
	entered chan struct{}
}

func newReview46Store() *review46Store {
	s := &review46Store{MemoryStore: idempotency.NewMemoryStore(0), entered: make(chan struct{}, 1024)}
	s.mode.Store("")
	return s
}

func (s *review46Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.begins.Add(1)
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	switch s.mode.Load().(string) {
	case "panic":
		panic("store panics")
	case "goexit":
		runtime.Goexit()
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	case "fail":
		return nil, errors.New("store down")
	}
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

type review46Result struct {
	claim  *idempotency.Claim
	stored *idempotency.Record
	err    error
	fp     string
}

func review46Begins(g *idempotency.Guard, n int, key string, fp func(i int) string) []review46Result {
	out := make([]review46Result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f := fp(i)
			c, rec, err := g.Begin(context.Background(), "s", key, f)
			out[i] = review46Result{c, rec, err, f}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// Simultaneous Begins of one key: one claim; the others answer by their own
// fingerprint (ErrInProgress for the claimer's, ErrKeyReused for another);
// once it completed, simultaneous repeats are all replayed (or ErrKeyReused).
func TestReview46_SimultaneousBegins(t *testing.T) {
	for round := 0; round < 20; round++ {
		s := newReview46Store()
		s.delay = time.Millisecond
		g := idempotency.NewGuard(s, idempotency.FailOpenAfter(-1))
		key := fmt.Sprint("k", round)
		fp := func(i int) string {
			if i%3 == 0 {
				return "B"
			}
			return "A"
		}
		res := review46Begins(g, 200, key, fp)
		var claim *idempotency.Claim
		for _, r := range res {
			if r.claim != nil {
				if claim != nil {
					t.Fatalf("two claims of one key")
				}
				claim = r.claim
			}
		}
		if claim == nil {
			t.Fatalf("no claim")
		}
		for _, r := range res {
			switch {
			case r.claim != nil:
			case r.fp == claim.Record.Fingerprint && !errors.Is(r.err, idempotency.ErrInProgress):
				t.Errorf("same fingerprint: %v %v", r.stored, r.err)
			case r.fp != claim.Record.Fingerprint && !errors.Is(r.err, idempotency.ErrKeyReused):
				t.Errorf("other fingerprint: %v %v", r.stored, r.err)
			}
		}
		if err := claim.Complete(context.Background(), idempotency.Record{Status: 200, Body: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		res = review46Begins(g, 200, key, fp)
		for _, r := range res {
			switch {
			case r.claim != nil:
				t.Fatalf("a repeat claimed the key again")
			case r.fp == claim.Record.Fingerprint && (r.err != nil || r.stored == nil || string(r.stored.Body) != "ok"):
				t.Errorf("repeat not replayed: %v %v", r.stored, r.err)
			case r.fp != claim.Record.Fingerprint && !errors.Is(r.err, idempotency.ErrKeyReused):
				t.Errorf("other fingerprint: %v %v", r.stored, r.err)
			}
		}
		if n := s.begins.Load(); n > 10 {
			t.Logf("round %d: %d store Begins for 400 Begins", round, n)
		}
	}
}

// The store panics (or calls Goexit) as the first Begin asks it: the Begins
// waiting for it get an error, not a claim nor a store call of their own;
// the next Begin after that asks the store again and claims.
func TestReview46_StorePanicWaiters(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		t.Run(mode, func(t *testing.T) {
			s := newReview46Store()
			s.delay = 50 * time.Millisecond
			s.mode.Store(mode)
			g := idempotency.NewGuard(s, idempotency.FailOpenAfter(-1))
			first := make(chan any, 1)
			go func() {
				defer func() { first <- recover() }()
				_, _, _ = g.Begin(context.Background(), "s", "k", "A")
				first <- "returned"
			}()
			<-s.entered
			res := make(chan error, 50)
			var claims atomic.Int32
			for i := 0; i < 50; i++ {
				go func() {
					c, _, err := g.Begin(context.Background(), "s", "k", "A")
					if c != nil {
						claims.Add(1)
					}
					res <- err
				}()
			}
			time.Sleep(10 * time.Millisecond)
			got := <-first
			t.Logf("first Begin: %v", got)
			var errs int
			for i := 0; i < 50; i++ {
				select {
				case err := <-res:
					if err != nil {
						errs++
					}
				case <-time.After(3 * time.Second):
					t.Fatalf("waiters stuck")
				}
			}
			if errs != 50 || claims.Load() != 0 || s.begins.Load() != 1 {
				t.Errorf("waiters: %d errors, %d claims, store asked %d times", errs, claims.Load(), s.begins.Load())
			}
			s.mode.Store("")
			s.delay = 0
			c, _, err := g.Begin(context.Background(), "s", "k", "A")
			if c == nil || err != nil {
				t.Errorf("after the panic: %v %v", c, err)
			} else {
				_ = c.Release(context.Background())
			}
		})
	}
}

// A waiter whose context is canceled returns at once, while the first Begin
// waits for a store that hangs.
func TestReview46_WaiterCanceled(t *testing.T) {
	s := newReview46Store()
	s.mode.Store("hang")
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(-1), idempotency.StoreTimeout(400*time.Millisecond), idempotency.Lease(10*time.Second))
	firstDone := make(chan struct{})
	defer func() { <-firstDone }()
	go func() { defer close(firstDone); _, _, _ = g.Begin(context.Background(), "s", "k", "A") }()
	<-s.entered
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := g.Begin(ctx, "s", "k", "A")
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("waiter returned %v after %v", err, time.Since(start))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v", err)
		}
	case <-time.After(time.Second):
		t.Fatalf("the waiter did not return on cancel")
	}
	// a deadline too
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	start = time.Now()
	_, _, err := g.Begin(ctx2, "s", "k", "A")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 200*time.Millisecond {
		t.Errorf("deadline waiter: %v after %v", err, time.Since(start))
	}
}

// Waiters get the store's failure, as the first; then the store is asked
// again by the next.
func TestReview46_WaitersGetStoreFailure(t *testing.T) {
	s := newReview46Store()
	s.delay = 20 * time.Millisecond
	s.mode.Store("fail")
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(-1))
	res := review46Begins(g, 50, "k", func(int) string { return "A" })
	for _, r := range res {
		if r.err == nil || r.claim != nil {
			t.Errorf("got %v %v", r.claim, r.err)
		}
	}
	t.Logf("store asked %d times for 50 Begins", s.begins.Load())
}

// Stress: many keys, many Begins, random store faults, -race: never two
// claims of one key at once.
func TestReview46_BeginStress(t *testing.T) {
	s := newReview46Store()
	g := idempotency.NewGuard(s, idempotency.FailOpenAfter(-1))
	var holders [8]atomic.Int32
	var wg sync.WaitGroup
	var bad atomic.Int32
	stop := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		modes := []string{"", "", "", "fail", "panic", "goexit"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				s.mode.Store("")
				return
			case <-time.After(time.Millisecond):
			}
			s.mode.Store(modes[i%len(modes)])
		}
	}()
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				k := (w + i) % len(holders)
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if i%5 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%3)*time.Millisecond)
				}
				var c *idempotency.Claim
				var err error
				func() {
					defer func() {
						if recover() != nil {
							err = errors.New("panicked")
						}
					}()
					done := make(chan struct{})
					go func() { // a Goexit ends this goroutine only
						defer close(done)
						defer func() {
							if recover() != nil {
								err = errors.New("panicked")
							}
						}()
						err = errors.New("goexit")
						c, _, err = g.Begin(ctx, "s", fmt.Sprint("k", k), "A")
					}()
					<-done
				}()
				cancel()
				if err != nil || c == nil {
					continue
				}
				if holders[k].Add(1) != 1 {
					bad.Add(1)
				}
				time.Sleep(100 * time.Microsecond)
				holders[k].Add(-1)
				_ = c.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-toggled
	if bad.Load() != 0 {
		t.Errorf("%d times two claims of a key at once", bad.Load())
	}
}
