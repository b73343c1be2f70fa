package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// r41Store wraps a MemoryStore; beginHook runs before each Begin (it may
// sleep, panic, Goexit, or return an error).
type r41Store struct {
	*MemoryStore
	beginHook func(ctx context.Context, n int64, key string, claim Record) error
	begins    atomic.Int64
}

func newR41Store() *r41Store { return &r41Store{MemoryStore: NewMemoryStore(0)} }

func (s *r41Store) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	n := s.begins.Add(1)
	if s.beginHook != nil {
		if err := s.beginHook(ctx, n, key, claim); err != nil {
			return nil, err
		}
	}
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

// A claimant of fingerprint A in flight while the store holds the ended
// record of fingerprint B: a Begin of B is owed the replay (the store
// would give it), not ErrKeyReused.
func TestReview41_WaiterOfRightFingerprintBehindWrongOne(t *testing.T) {
	s := newR41Store()
	g := NewGuard(s, StoreTimeout(200*time.Millisecond), Lease(time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
	ctx := context.Background()
	c, _, err := g.Begin(ctx, "sc", "k", "B")
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if err := c.Complete(ctx, Record{Status: 201, Body: []byte("made")}); err != nil {
		t.Fatal(err)
	}
	gate, entered := r41Gate(s)
	done := make(chan error, 1)
	go func() { _, _, err := g.Begin(ctx, "sc", "k", "A"); done <- err }() // a wrong payload with the key
	<-entered
	type res struct {
		rec *Record
		err error
	}
	got := make(chan res, 1)
	go func() { _, rec, err := g.Begin(ctx, "sc", "k", "B"); got <- res{rec, err} }() // the right retry
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-done; !errors.Is(err, ErrKeyReused) {
		t.Errorf("wrong payload: %v", err)
	}
	r := <-got
	if r.err != nil || r.rec == nil || r.rec.Status != 201 {
		t.Errorf("right retry behind a wrong payload: rec %v err %v; want the replay of 201 (a lone Begin gets it)", r.rec, r.err)
	}
}

// Same, the key held by another replica (a guard of its own) for B: the B
// Begin is owed ErrInProgress (409, retried), not ErrKeyReused (422, final).
func TestReview41_WaiterOfRightFingerprintInProgressElsewhere(t *testing.T) {
	s := newR41Store()
	other := NewGuard(s.MemoryStore, StoreTimeout(200*time.Millisecond), Lease(time.Second))
	g := NewGuard(s, StoreTimeout(200*time.Millisecond), Lease(time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
	ctx := context.Background()
	c, _, err := other.Begin(ctx, "sc", "k", "B")
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	defer c.Release(ctx)
	gate, entered := r41Gate(s)
	go func() { _, _, _ = g.Begin(ctx, "sc", "k", "A") }()
	<-entered
	got := make(chan error, 1)
	go func() { _, _, err := g.Begin(ctx, "sc", "k", "B"); got <- err }()
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-got; !errors.Is(err, ErrInProgress) {
		t.Errorf("B behind A, B in progress on another replica: %v; want ErrInProgress (a lone Begin gets it)", err)
	}
}

// A store that hangs for its StoreTimeout and then panics (a client whose
// error path panics): were each waiter, after its claimant panicked, to
// become the claimant for the rest, the last of n would wait about n
// store timeouts, not one.
func TestReview41_PanicChainBound(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		t.Run(mode, func(t *testing.T) {
			const T = 50 * time.Millisecond
			s := newR41Store()
			s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error {
				<-ctx.Done()
				if mode == "panic" {
					panic("store client bug")
				}
				runtime.Goexit()
				return nil
			}
			g := NewGuard(s, StoreTimeout(T), Lease(time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
			const n = 40
			var wg sync.WaitGroup
			var maxWait atomic.Int64
			start := time.Now()
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					defer func() {
						recover()
						d := int64(time.Since(t0))
						for {
							m := maxWait.Load()
							if d <= m || maxWait.CompareAndSwap(m, d) {
								break
							}
						}
					}()
					_, _, _ = g.Begin(context.Background(), "sc", "k", "fp")
				}()
			}
			wg.Wait()
			m := time.Duration(maxWait.Load())
			t.Logf("%s: %d Begins, store calls %d, longest Begin %v (store timeout %v), all %v", mode, n, s.begins.Load(), m, T, time.Since(start))
			if m > 10*T {
				t.Errorf("a Begin waited %v, %.0f store timeouts: not bounded by its own store calls", m, float64(m)/float64(T))
			}
		})
	}
}

// A store that panics once (the first call) then works: the panic is its
// Begin's caller's, the waiters get an error each (a 503, not a try each
// in turn), none claims, and the key is free for the next Begin.
//
// Each round runs in a bubble: the gate opens once every Begin is parked
// (on the gate or on the first Begin), not after a guessed real-time
// sleep that a loaded machine outran (CI: 163 of 200 came after the
// panic).
func TestReview41_PanicOnceThenOneClaim(t *testing.T) {
	for round := range 100 {
		synctest.Test(t, func(t *testing.T) { r41PanicOnceRound(t, round) })
	}
}

func r41PanicOnceRound(t *testing.T, round int) {
	goexit := round%2 == 1
	s := newR41Store()
	gate := make(chan struct{})
	s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error {
		if n == 1 {
			<-gate
			if goexit {
				runtime.Goexit()
			}
			panic("once")
		}
		return nil
	}
	g := NewGuard(s, StoreTimeout(time.Second), Lease(3*time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
	const n = 200
	var claims, inprog, panics, other atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held []*Claim
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			returned := false
			defer func() {
				if recover() != nil || !returned {
					panics.Add(1)
				}
			}()
			c, _, err := g.Begin(context.Background(), "sc", "k", "fp")
			returned = true
			switch {
			case c != nil:
				claims.Add(1)
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			case errors.Is(err, ErrInProgress):
				inprog.Add(1)
			case errors.Is(err, errClaimPanicked):
				other.Add(1)
			default:
				t.Errorf("a waiter's error: %v", err)
			}
		}()
		if i == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(5 * time.Millisecond)
	close(gate)
	wg.Wait()
	// Every waiter gets the error: none claims.
	if claims.Load() != 0 || panics.Load() != 1 || other.Load() != n-1 {
		t.Fatalf("round %d: claims %d panics %d in progress %d other %d", round, claims.Load(), panics.Load(), inprog.Load(), other.Load())
	}
	for _, c := range held {
		c.Release(context.Background())
	}
	c, _, err := g.Begin(context.Background(), "sc", "k", "fp")
	if c == nil {
		t.Fatalf("round %d: the key not free after the panic: %v", round, err)
	}
	c.Release(context.Background())
}

// Thousands of waiters on a claimant whose store hangs until the store
// timeout: all get the store's failure within about one store timeout,
// and no goroutine is left.
func TestReview41_ThousandsOnHangingStore(t *testing.T) {
	const T = 200 * time.Millisecond
	s := newR41Store()
	s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error { <-ctx.Done(); return ctx.Err() }
	before := runtime.NumGoroutine()
	g := NewGuard(s, StoreTimeout(T), Lease(time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
	const n = 5000
	var wg sync.WaitGroup
	var maxWait atomic.Int64
	var errs sync.Map
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the callers have left
			t0 := time.Now()
			_, _, err := g.Begin(ctx, "sc", "k", "fp")
			d := int64(time.Since(t0))
			for {
				m := maxWait.Load()
				if d <= m || maxWait.CompareAndSwap(m, d) {
					break
				}
			}
			k := "nil"
			if err != nil {
				k = err.Error()
			}
			v, _ := errs.LoadOrStore(k, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}()
	}
	wg.Wait()
	errs.Range(func(k, v any) bool { t.Logf("%q: %d", k, v.(*atomic.Int64).Load()); return true })
	t.Logf("store calls %d, longest Begin %v", s.begins.Load(), time.Duration(maxWait.Load()))
	if m := time.Duration(maxWait.Load()); m > 3*T {
		t.Errorf("longest Begin %v, over 3 store timeouts", m)
	}
	time.Sleep(5 * T) // reaping of the orphans ends
	if after := runtime.NumGoroutine(); after > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines %d before, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// The store fails for FailOpenAfter; meanwhile many Begins of one key
// wait on claimants. Whatever the interleaving, at most one claim is
// held at once by this process (store or local).
func TestReview41_FailOpenMidwayOneClaim(t *testing.T) {
	const T = 20 * time.Millisecond
	for round := range 30 {
		s := newR41Store()
		var failing atomic.Bool
		failing.Store(true)
		s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error {
			if failing.Load() {
				time.Sleep(time.Duration(n%3) * T / 2)
				return errors.New("down")
			}
			return nil
		}
		g := NewGuard(s, StoreTimeout(T), Lease(10*T), FailOpenAfter(60*time.Millisecond), WithLogger(r41Quiet))
		var holding, maxHolding, claims atomic.Int64
		var kinds sync.Map
		stop := time.Now().Add(300 * time.Millisecond)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					c, _, err := g.Begin(context.Background(), "sc", "k", "fp")
					if c == nil {
						k := fmt.Sprint(err)
						v, _ := kinds.LoadOrStore(k, new(atomic.Int64))
						v.(*atomic.Int64).Add(1)
						time.Sleep(200 * time.Microsecond)
						continue
					}
					claims.Add(1)
					h := holding.Add(1)
					for {
						m := maxHolding.Load()
						if h <= m || maxHolding.CompareAndSwap(m, h) {
							break
						}
					}
					time.Sleep(time.Millisecond)
					holding.Add(-1)
					t0 := time.Now()
					rerr := c.Release(context.Background()) // free for the next
					if rerr != nil || time.Since(t0) > 50*time.Millisecond {
						t.Logf("claim local=%v released in %v: %v", c.local.Load(), time.Since(t0), rerr)
					}
				}
			}()
		}
		time.Sleep(150 * time.Millisecond)
		failing.Store(false) // back midway
		wg.Wait()
		if maxHolding.Load() > 1 {
			t.Fatalf("round %d: %d claims held at once (claims %d)", round, maxHolding.Load(), claims.Load())
		}
		if round == 0 {
			t.Logf("claims %d, open %v", claims.Load(), g.out.isOpen())
			kinds.Range(func(k, v any) bool { t.Logf("%q: %d", k, v.(*atomic.Int64).Load()); return true })
		}
	}
}

// A Begin whose store call timed out leaves a claim that lands later
// (orphan); its waiters got the failure; the next Begins free it and
// claim: one run, and the others replay its record or get ErrInProgress.
func TestReview41_OrphanThenWaitersReplay(t *testing.T) {
	const T = 50 * time.Millisecond
	s := newR41Store()
	var late atomic.Bool
	late.Store(true)
	landed := make(chan struct{})
	s.beginHook = func(ctx context.Context, n int64, key string, claim Record) error {
		if late.Load() && n == 1 {
			<-ctx.Done()
			go func() {
				time.Sleep(T / 2)
				_, _ = s.MemoryStore.Begin(context.Background(), key, claim, 20*T)
				close(landed)
			}()
			return ctx.Err()
		}
		return nil
	}
	g := NewGuard(s, StoreTimeout(T), Lease(20*T), FailOpenAfter(-1), WithLogger(r41Quiet))
	ctx := context.Background()
	var wg sync.WaitGroup
	errsFirst := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _, err := g.Begin(ctx, "sc", "k", "fp"); errsFirst <- err }()
	}
	wg.Wait()
	close(errsFirst)
	for err := range errsFirst {
		if err == nil || errors.Is(err, ErrInProgress) {
			t.Errorf("first wave: %v", err)
		}
	}
	late.Store(false)
	<-landed
	var runs, replays, inprog atomic.Int64
	for range 3 {
		var wg sync.WaitGroup
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, rec, err := g.Begin(ctx, "sc", "k", "fp")
				switch {
				case c != nil:
					runs.Add(1)
					_ = c.Complete(ctx, Record{Status: 200, Body: []byte("x"), Header: http.Header{"A": {"1"}}})
				case rec != nil:
					if rec.Fingerprint != "fp" || string(rec.Body) != "x" || rec.Status != 200 {
						t.Errorf("replay %+v", rec)
					}
					replays.Add(1)
				case errors.Is(err, ErrInProgress):
					inprog.Add(1)
				default:
					t.Errorf("err %v", err)
				}
			}()
		}
		wg.Wait()
	}
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
	_, rec, err := g.Begin(ctx, "sc", "k", "fp")
	if err != nil || rec == nil || rec.Status != 200 {
		t.Errorf("after: %v %v", rec, err)
	}
	t.Logf("replays %d in progress %d", replays.Load(), inprog.Load())
}

var r41Quiet = slog.New(slog.DiscardHandler)

// A key that the guard holds itself is refused without asking the store:
// with another fingerprint as reused, which is what the store would say
// (Begin's doc says so).
func TestReview41_HeldKeyOtherFingerprint(t *testing.T) {
	g := NewGuard(nil, WithLogger(r41Quiet))
	ctx := context.Background()
	c, _, err := g.Begin(ctx, "sc", "k", "A")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx)
	_, _, err = g.Begin(ctx, "sc", "k", "B")
	if !errors.Is(err, ErrKeyReused) {
		t.Errorf("held key, other fingerprint: %v; the doc says refused as the key reused", err)
	}
}

// r41Gate has s's Begins wait for gate to be closed; entered receives
// once a Begin waits.
func r41Gate(s *r41Store) (gate, entered chan struct{}) {
	gate, entered = make(chan struct{}), make(chan struct{}, 1)
	s.beginHook = func(context.Context, int64, string, Record) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
		return nil
	}
	return gate, entered
}
