package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r144Server struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func r144FreePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func r144Start(t *testing.T) *r144Server {
	s := &r144Server{t: t, port: r144FreePort(t)}
	s.start()
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *r144Server) start() {
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for range 200 {
		c, err := net.Dial("tcp", s.addr())
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatal("redis did not start")
}

func (s *r144Server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *r144Server) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
func (s *r144Server) freeze() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *r144Server) thaw()   { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *r144Server) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
}

const r144Flush = 50 * time.Millisecond

func r144Breaker(name string, c *redis.Client, opts ...breaker.Option) *breaker.Breaker {
	o := append([]breaker.Option{breaker.Shared(breakerstore.New(c, "r144:")), breaker.FlushInterval(r144Flush),
		breaker.FailureRate(0.5, 20), breaker.Window(2*time.Second, 10), breaker.OpenTimeout(200 * time.Millisecond),
		breaker.ConsecutiveFailures(0)}, opts...)
	return breaker.New(name, o...)
}

// Promise 4 against a real frozen server: Close within about two flush
// intervals, and no goroutine left once the client is closed.
func TestReview144CloseFrozenNoLeak(t *testing.T) {
	srv := r144Start(t)
	c := srv.client()
	b := r144Breaker("close-frozen", c)
	for range 20 {
		_ = b.Execute(t.Context(), func(context.Context) error { return nil })
		time.Sleep(5 * time.Millisecond)
	}
	srv.freeze()
	time.Sleep(r144Flush / 3) // a flush under way against the frozen server
	start := time.Now()
	_ = b.Close()
	took := time.Since(start)
	_ = c.Close()
	srv.kill()
	if took > 2*r144Flush+30*time.Millisecond {
		t.Errorf("Close took %v against a frozen server; bound ~%v", took, 2*r144Flush)
	}
	if err := goleak.Find(goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
		t.Errorf("goroutines left after Close and the client's Close: %v", err)
	}
}

// Promise 1: a replica made while the server is frozen (or dead): its
// first call waits at most FlushInterval/10 and succeeds.
func TestReview144HelloFrozenAndDead(t *testing.T) {
	for _, how := range []string{"frozen", "dead"} {
		t.Run(how, func(t *testing.T) {
			srv := r144Start(t)
			c := srv.client()
			defer c.Close()
			if how == "frozen" {
				srv.freeze()
				defer srv.thaw()
			} else {
				srv.kill()
			}
			b := r144Breaker("hello-"+how, c)
			defer b.Close()
			start := time.Now()
			if err := b.Execute(t.Context(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("first call failed: %v", err)
			}
			if d := time.Since(start); d > r144Flush/10+10*time.Millisecond {
				t.Errorf("first call waited %v; bound %v", d, r144Flush/10)
			}
			for range 50 {
				if err := b.Execute(t.Context(), func(context.Context) error { return nil }); err != nil {
					t.Fatalf("a call failed with the store %s: %v", how, err)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
}

// Promise 2 and the first rule: the fleet opened on a real outage; then
// the store froze, the dependency recovered, every replica went alone and
// served it. The store comes back holding the stale open state: no call
// to the (healthy) dependency should be rejected because of it.
func TestReview144RejoinStaleOpenRejectsHealthy(t *testing.T) {
	for _, hor := range []uint32{1, 5} {
		t.Run(fmt.Sprintf("HalfOpenRequests=%d", hor), func(t *testing.T) { r144Rejoin(t, hor) })
	}
}

func r144Rejoin(t *testing.T, hor uint32) {
	srv := r144Start(t)
	var healthy atomic.Bool
	boom := errors.New("dependency down")
	dep := func(context.Context) error {
		if healthy.Load() {
			return nil
		}
		return boom
	}
	const n = 3
	var firstRej, lastRej atomic.Int64
	var bs []*breaker.Breaker
	var cs []*redis.Client
	for i := range n {
		c := srv.client()
		cs = append(cs, c)
		bs = append(bs, r144Breaker(fmt.Sprintf("rejoin-%d", 0*i), c, breaker.HalfOpenRequests(hor)))
	}
	defer func() {
		for i := range bs {
			_ = bs[i].Close()
			_ = cs[i].Close()
		}
	}()
	call := func(phase *atomic.Int64, rej *atomic.Int64, stop <-chan struct{}, wg *sync.WaitGroup) {
		for _, b := range bs {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					err := b.Execute(context.Background(), dep)
					if breaker.IsRejection(err) && rej != nil {
						rej.Add(1)
						now := time.Now().UnixNano()
						firstRej.CompareAndSwap(0, now)
						lastRej.Store(now)
					}
					phase.Add(1)
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
	}
	// 1. outage: the fleet opens.
	var calls, rejected atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	call(&calls, nil, stop, &wg)
	deadline := time.Now().Add(3 * time.Second)
	for bs[0].FleetState() != resilience.StateOpen && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if bs[0].FleetState() != resilience.StateOpen {
		t.Fatalf("the fleet never opened")
	}
	// 2. store frozen, dependency back, replicas go alone.
	srv.freeze()
	healthy.Store(true)
	time.Sleep(time.Second) // > max(OpenTimeout, 3 intervals)
	stop = make(chan struct{})
	var aloneRej atomic.Int64
	call(&calls, &aloneRej, stop, &wg)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("alone: %d rejections", aloneRej.Load())
	// 3. store back: count rejections of healthy calls over 1 s.
	stop = make(chan struct{})
	calls.Store(0)
	firstRej.Store(0)
	call(&calls, &rejected, stop, &wg)
	thawed := time.Now()
	srv.thaw()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if r := rejected.Load(); r > 0 {
		t.Logf("rejections from %v to %v after the thaw", time.Duration(firstRej.Load()-thawed.UnixNano()), time.Duration(lastRej.Load()-thawed.UnixNano()))
		t.Errorf("after the store came back, %d of %d calls to a healthy dependency were rejected (the fleet's stale open state, from before the store's outage)", r, calls.Load())
	}
}

// Promise 3 for real: SetMode while the server is frozen returns an error
// within its bound; the replica takes the mode; once the server is back,
// the mode is written, and another replica takes it. Then back to Normal
// the same way: no replica stays forced open.
func TestReview144SetModeFrozenResent(t *testing.T) {
	srv := r144Start(t)
	ca, cb := srv.client(), srv.client()
	defer ca.Close()
	defer cb.Close()
	a := r144Breaker("mode", ca)
	defer a.Close()
	b := r144Breaker("mode", cb)
	defer b.Close()
	time.Sleep(3 * r144Flush)
	for _, m := range []breaker.Mode{breaker.ForcedOpen, breaker.Normal} {
		srv.freeze()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err := a.SetMode(ctx, m, "op")
		cancel()
		if err == nil {
			t.Fatalf("SetMode(%v) against a frozen server returned no error", m)
		}
		if d := time.Since(start); d > 400*time.Millisecond {
			t.Errorf("SetMode took %v with a 300ms ctx", d)
		}
		srv.thaw()
		deadline := time.Now().Add(2 * time.Second)
		for b.Mode().Mode != m && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if b.Mode().Mode != m {
			t.Fatalf("the other replica is in mode %v 2 s after the server came back; want %v", b.Mode().Mode, m)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); (m == breaker.Normal) != (err == nil) {
			t.Fatalf("mode %v: call on the other replica: %v", m, err)
		}
	}
}
