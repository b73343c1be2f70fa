package breakerstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// left147 returns the stacks of goroutines that belong to a shared breaker
// or its store's calls (the test's own goroutine aside).
func left147() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "left147") || strings.Contains(g, "testing.tRunner") && strings.Contains(g, "Review147") && !strings.Contains(g, "breaker.") {
			continue
		}
		if strings.Contains(g, "resiliencekit/breaker.") || strings.Contains(g, "breakerstore.") ||
			strings.Contains(g, "(*PubSub)") {
			out = append(out, g)
		}
	}
	return out
}

// subscribed147 returns the lines of CLIENT LIST of connections with a
// subscription.
func subscribed147(t *testing.T, c *redis.Client) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var out []string
	for _, l := range strings.Split(list, "\n") {
		if strings.Contains(l, " sub=") && !strings.Contains(l, " sub=0 ") {
			out = append(out, l)
		}
	}
	return out
}

func shared147(s *breakerstore.Store, name string) *breaker.Breaker {
	return breaker.New(name, breaker.Shared(s), breaker.FailureRate(0.5, 10),
		breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Second),
		breaker.FlushInterval(100*time.Millisecond))
}

// TestReview147CloseLeavesNothing: with go-redis on a real redis-server,
// nothing is left once Close returns: no goroutine of the breaker or its
// store's calls, no subscribed connection. Closed at once after New (the
// watcher subscribing, the hello flush under way) and after a while.
func TestReview147CloseLeavesNothing(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	cl := srv.Client()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = admin.Close() })
	s := breakerstore.New(cl, "r147:")
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 300 * time.Millisecond} {
		strict, late, subs := 0, 0, 0
		const n = 5
		for i := range n {
			b := shared147(s, fmt.Sprintf("leave-%v-%d", after, i))
			time.Sleep(after)
			for range 10 {
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
			}
			start := time.Now()
			_ = b.Close()
			if d := time.Since(start); d > 200*time.Millisecond+20*time.Millisecond {
				t.Errorf("after %v: Close took %v", after, d)
			}
			if g := left147(); len(g) > 0 {
				strict++
				if strict == 1 {
					t.Logf("after %v: at Close's return:\n%s", after, strings.Join(g, "\n\n"))
				}
			}
			time.Sleep(50 * time.Millisecond)
			if g := left147(); len(g) > 0 {
				late++
				t.Logf("after %v: 50ms after Close:\n%s", after, strings.Join(g, "\n\n"))
			}
			if l := subscribed147(t, admin); len(l) > 0 {
				subs++
				t.Logf("after %v: 50ms after Close, subscribed: %v", after, l)
			}
		}
		// At Close's return, the store's Watch may still be closing its
		// subscription (it returned with its context; its goroutines end
		// with go-redis's Close): what must hold is that they end soon.
		t.Logf("closed %v after New: goroutines left at Close's return in %d of %d", after, strict, n)
		if late > 0 || subs > 0 {
			t.Errorf("closed %v after New: goroutines left 50ms after Close in %d of %d; subscribed connection 50ms later in %d of %d",
				after, late, n, subs, n)
		}
	}
}

// TestReview147CloseFrozenServer: Close is bounded with the server frozen
// (SIGSTOP); once it thaws, nothing is left: no goroutine, no subscribed
// connection.
func TestReview147CloseFrozenServer(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = cl.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = admin.Close() })
	s := breakerstore.New(cl, "r147:")
	for _, frozenAfter := range []time.Duration{0, 300 * time.Millisecond} {
		b := shared147(s, fmt.Sprintf("frozen-%v", frozenAfter))
		time.Sleep(frozenAfter)
		srv.Freeze()
		time.Sleep(30 * time.Millisecond)
		start := time.Now()
		_ = b.Close()
		d := time.Since(start)
		atClose := left147()
		srv.Thaw()
		if d > 200*time.Millisecond+20*time.Millisecond {
			t.Errorf("frozen %v after New: Close took %v, bound two flush intervals (200ms)", frozenAfter, d)
		}
		if len(atClose) > 0 {
			t.Logf("frozen %v after New: %d goroutines left at Close's return (server frozen):\n%s", frozenAfter, len(atClose), strings.Join(atClose, "\n\n"))
		}
		deadline := time.Now().Add(time.Second)
		var g, subs []string
		for time.Now().Before(deadline) {
			g, subs = left147(), subscribed147(t, admin)
			if len(g) == 0 && len(subs) == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(g) > 0 || len(subs) > 0 {
			t.Errorf("frozen %v after New: 1s after the thaw, %d goroutines and %d subscribed connections left:\n%s\n%v", frozenAfter, len(g), len(subs), strings.Join(g, "\n\n"), subs)
		}
	}
}

// TestReview147SetModeFrozenBounded: SetMode on a frozen server returns
// within its ctx (plus storeGrace) and within 2 s.
func TestReview147SetModeFrozenBounded(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	s := breakerstore.New(srv.Client(), "r147:")
	b := shared147(s, "setmode-frozen")
	defer b.Close()
	time.Sleep(150 * time.Millisecond)
	srv.Freeze()
	defer srv.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err := b.SetMode(ctx, breaker.ForcedOpen, "alice")
	d1 := time.Since(start)
	cancel()
	start = time.Now()
	err2 := b.SetMode(context.Background(), breaker.Normal, "alice")
	d2 := time.Since(start)
	if err == nil || d1 > 100*time.Millisecond+110*time.Millisecond {
		t.Errorf("SetMode with a 100ms ctx on a frozen server: %v after %v", err, d1)
	}
	if err2 == nil || d2 > 2*time.Second+110*time.Millisecond {
		t.Errorf("SetMode with no deadline on a frozen server: %v after %v", err2, d2)
	}
	t.Logf("SetMode frozen: %v (ctx 100ms), %v (no ctx bound)", d1, d2)
}

// TestReview147CloseFrozenDefaultClientGoleak: a client with go-redis's
// default ReadTimeout (3 s), the server frozen as the breaker is made and
// closed: its goroutines end within DialTimeout + ReadTimeout after Close.
func TestReview147CloseFrozenDefaultClientGoleak(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cl.Close() })
	if err := cl.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	s := breakerstore.New(cl, "r147:")
	srv.Freeze()
	defer srv.Thaw()
	b := shared147(s, "frozen-goleak")
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	_ = b.Close()
	closed := time.Since(start)
	deadline := time.Now().Add(12 * time.Second)
	var g []string
	for time.Now().Before(deadline) {
		if g = left147(); len(g) == 0 {
			break
		}
		if time.Since(start) > 2*time.Second && time.Since(start) < 2*time.Second+25*time.Millisecond {
			for _, x := range g {
				t.Logf("left at 2s: %s", x[:min(len(x), 300)])
				for _, l := range strings.Split(x, "\n") {
					if strings.Contains(l, "breakerstore") || strings.Contains(l, "resiliencekit/breaker") || strings.Contains(l, "redis.go") || strings.Contains(l, "pubsub.go") {
						t.Logf("   %s", l)
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Close took %v; breaker/store goroutines gone %v after Close returned (server still frozen)", closed, time.Since(start)-closed)
	if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
		t.Logf("goleak: %v", err)
	}
	// The documented bound (breakerstore's Watch): a subscription's dial
	// and handshake with a frozen server end within the client's
	// DialTimeout and ReadTimeout (5 s and 3 s by default).
	if left := time.Since(start) - closed; left > 8*time.Second+time.Second {
		t.Errorf("goroutines of the store's Watch left %v after Close, past DialTimeout + ReadTimeout", left)
	}
}
