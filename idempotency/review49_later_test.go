package idempotency

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// r49Store wraps a MemoryStore: hang makes every call block until its ctx
// ends; fail makes every call fail at once; panicOn panics in Complete.
type r49Store struct {
	mem                     *MemoryStore
	hang, fail, panicOn     atomic.Bool
	completes, begins, runs atomic.Int64
}

var errR49 = errors.New("r49: store down")

func (s *r49Store) gate(ctx context.Context) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if s.fail.Load() {
		return errR49
	}
	return nil
}
func (s *r49Store) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	s.begins.Add(1)
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	return s.mem.Begin(ctx, key, claim, lease)
}
func (s *r49Store) Renew(ctx context.Context, key string, claim Record, lease time.Duration) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Renew(ctx, key, claim, lease)
}
func (s *r49Store) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	s.completes.Add(1)
	if s.panicOn.Load() {
		panic("r49: store panicked")
	}
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}
func (s *r49Store) Release(ctx context.Context, key string, claim Record) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Release(ctx, key, claim)
}

// The answer is to be held at most two StoreTimeouts by a hanging
// store. With a renewal in flight when the handler ends with a release
// status (or Abandon), stop() waits for it, then the release's first try.
func TestReview49_CompleteLaterHoldReleasePath(t *testing.T) {
	for _, mode := range []string{"status503", "abandon", "store200"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &r49Store{mem: NewMemoryStore(0)}
				g := NewGuard(s, Lease(3*time.Second), StoreTimeout(time.Second), FailOpenAfter(-1))
				c, _, err := g.Begin(context.Background(), "s", "k", "fp")
				if err != nil || c == nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
				s.hang.Store(true)
				time.Sleep(600 * time.Millisecond) // renewal at 1 s is in flight, hangs to 2 s
				status := 200
				switch mode {
				case "status503":
					status = 503
				case "abandon":
					c.Abandon()
				}
				start := time.Now()
				c.CompleteLater(context.Background(), Record{Status: status})
				held := time.Since(start)
				t.Logf("%s: CompleteLater held the answer %v (StoreTimeout 1s)", mode, held)
				if held > 2500*time.Millisecond { // two StoreTimeouts when the key is freed (the doc)
					t.Errorf("%s: answer held %v, more than two StoreTimeouts (1s)", mode, held)
				}
				s.hang.Store(false)
				time.Sleep(10 * time.Second)
			})
		})
	}
}

// Exactly one run per key while CompleteLater's save goes on: repeats on
// the same guard, and on a second guard sharing the store, get no claim.
func TestReview49_CompleteLaterRepeatsDuringSave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &r49Store{mem: NewMemoryStore(0)}
		g := NewGuard(s, Lease(3*time.Second), StoreTimeout(time.Second), FailOpenAfter(-1))
		g2 := NewGuard(s, Lease(3*time.Second), StoreTimeout(time.Second), FailOpenAfter(-1))
		c, _, _ := g.Begin(context.Background(), "s", "k", "fp")
		s.fail.Store(true)
		c.CompleteLater(context.Background(), Record{Status: 201, Body: []byte("x")})
		if err := c.Release(context.Background()); err != nil { // the deferred Release in run()
			t.Fatalf("deferred Release after CompleteLater: %v", err)
		}
		var claims atomic.Int64
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 50 * time.Millisecond)
				if i == 20 {
					s.fail.Store(false)
				}
				gg := g
				if i%2 == 1 {
					gg = g2
				}
				c2, rec, err := gg.Begin(context.Background(), "s", "k", "fp")
				if c2 != nil {
					claims.Add(1)
					c2.Complete(context.Background(), Record{Status: 201})
				}
				_ = rec
				_ = err
			}()
		}
		wg.Wait()
		if n := claims.Load(); n != 0 {
			t.Errorf("%d repeats ran while the first's save went on", n)
		}
		c3, rec, err := g2.Begin(context.Background(), "s", "k", "fp")
		if c3 != nil || rec == nil || string(rec.Body) != "x" {
			t.Errorf("after the store came back: claim %v rec %+v err %v", c3 != nil, rec, err)
		}
		time.Sleep(10 * time.Second)
	})
}

// Many concurrent CompleteLater + deferred Release on a flaky store, -race.
func TestReview49_CompleteLaterRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &r49Store{mem: NewMemoryStore(0)}
		g := NewGuard(s, Lease(3*time.Second), StoreTimeout(time.Second), FailOpenAfter(-1))
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, _, err := g.Begin(context.Background(), "s", string(rune('a'+i%26))+string(rune('a'+i/26)), "fp")
				if err != nil || c == nil {
					return
				}
				if i%3 == 0 {
					s.fail.Store(i%2 == 0)
				}
				done := make(chan struct{})
				go func() { defer close(done); c.Release(context.Background()) }()
				c.CompleteLater(context.Background(), Record{Status: 200 + i%5})
				<-done
			}()
		}
		wg.Wait()
		s.fail.Store(false)
		time.Sleep(20 * time.Second)
	})
}

// A store that panics in Complete under CompleteLater: on the request's
// goroutine (Complete) a panic can be recovered by the server; on
// CompleteLater's goroutine it ends the process.
func TestReview49_CompleteLaterStorePanicKillsProcess(t *testing.T) {
	if os.Getenv("R49_CHILD") == "1" {
		s := &r49Store{mem: NewMemoryStore(0)}
		g := NewGuard(s, Lease(3*time.Second), StoreTimeout(time.Second))
		c, _, _ := g.Begin(context.Background(), "s", "k", "fp")
		s.panicOn.Store(true)
		func() {
			defer func() { recover() }() // the server's recovery interceptor
			c.CompleteLater(context.Background(), Record{Status: 200})
		}()
		time.Sleep(100 * time.Millisecond)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview49_CompleteLaterStorePanicKillsProcess$")
	cmd.Env = append(os.Environ(), "R49_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("process ended by a store panic on CompleteLater's goroutine, a recovery on the request's goroutine cannot catch it: %v\n%.300s", err, out)
	}
}
