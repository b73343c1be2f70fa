package breakerstore_test

// review155: the vouching replica's held counts on a real Redis, several
// replicas each with a client of its own, pub/sub on.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errDep155 = errors.New("dependency down")

type rec155 struct {
	mu  sync.Mutex
	evs []resilience.Event
	at  []time.Time
}

func (r *rec155) add(e resilience.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
}

// first returns when the first event matching fn after t came, zero if none.
func (r *rec155) first(after time.Time, fn func(resilience.Event) bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.evs {
		if r.at[i].After(after) && fn(e) {
			return r.at[i]
		}
	}
	return time.Time{}
}

type fleet155 struct {
	t                  *testing.T
	srv                *redistest.Server
	proxy              *redistest.Proxy
	v, r2, r3          *breaker.Breaker
	vrec, r2rec, r3rec *rec155
	failing            atomic.Bool
	admin              *redis.Client
	name, prefix       string
	flush, openT       time.Duration
}

func newFleet155(t *testing.T, name string, halfOpen uint32) *fleet155 {
	restore := breakerstore.SetWatchPing(500 * time.Millisecond)
	t.Cleanup(restore)
	f := &fleet155{t: t, name: name, prefix: "r155:", flush: 50 * time.Millisecond, openT: 400 * time.Millisecond}
	f.srv = redistest.Start(t, "--appendonly", "no")
	f.proxy = redistest.NewProxy(t, f.srv.Addr())
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
			MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	f.admin = client(f.srv.Addr())
	mk := func(c *redis.Client, r *rec155) *breaker.Breaker {
		b := breaker.New(name,
			breaker.Shared(breakerstore.New(c, f.prefix)),
			breaker.FailureRate(0.5, 4), breaker.Window(5*time.Second, 5),
			breaker.OpenTimeout(f.openT), breaker.FlushInterval(f.flush),
			breaker.HalfOpenRequests(halfOpen),
			breaker.WithListener(resilience.ListenerFunc(r.add)))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	f.vrec, f.r2rec, f.r3rec = &rec155{}, &rec155{}, &rec155{}
	f.v = mk(client(f.proxy.Addr()), f.vrec)
	f.r2 = mk(client(f.srv.Addr()), f.r2rec)
	f.r3 = mk(client(f.srv.Addr()), f.r3rec)
	return f
}

func (f *fleet155) call(b *breaker.Breaker) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return b.Execute(ctx, func(context.Context) error {
		if f.failing.Load() {
			return errDep155
		}
		return nil
	})
}

func (f *fleet155) waitFor(what string, d time.Duration, cond func() bool) {
	f.t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			f.t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *fleet155) status() breaker.FleetStatus {
	f.t.Helper()
	st, err := f.r3.Fleet(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// vouch opens the fleet, cuts V off, lets the dependency recover and V
// serve it alone past the half-open moment, then heals V's link: V finds
// the fleet half-open in the opening it went alone in, and vouches.
// R2 and R3 make no call after the opening.
func (f *fleet155) vouch() {
	t := f.t
	f.failing.Store(true)
	for range 4 {
		_ = f.call(f.r2)
	}
	f.waitFor("fleet open (R2)", time.Second, func() bool { return f.r2.FleetState() == resilience.StateOpen })
	f.waitFor("fleet open (V)", time.Second, func() bool { return f.v.FleetState() == resilience.StateOpen })
	f.proxy.Cut()
	f.failing.Store(false)
	ok := 0
	end := time.Now().Add(f.openT + 300*time.Millisecond)
	for time.Now().Before(end) {
		if f.call(f.v) == nil {
			ok++
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok < 3 {
		t.Fatalf("V served %d calls alone", ok)
	}
	if st := f.status(); st.State != resilience.StateHalfOpen {
		t.Fatalf("fleet %v, want half-open", st.State)
	}
	healed := time.Now()
	f.proxy.Heal()
	f.waitFor("V restored", 2*time.Second, func() bool {
		return !f.vrec.first(healed, func(e resilience.Event) bool { return e.Kind == resilience.EventSharedStateRestored }).IsZero()
	})
	if st := f.status(); st.State != resilience.StateHalfOpen {
		t.Fatalf("fleet %v after V rejoined, want still half-open", st.State)
	}
	if f.v.FleetState() != resilience.StateClosed {
		t.Fatalf("V does not vouch: it goes by the fleet as %v", f.v.FleetState())
	}
}

func fleetTo155(to resilience.State) func(resilience.Event) bool {
	return func(e resilience.Event) bool {
		return e.Kind == resilience.EventStateChange && strings.HasSuffix(e.Name, "(fleet)") && e.To == to
	}
}

// TestReview155VouchedFailuresReopenTheFleet: promise (2). V's probe
// closes the fleet, then the dependency fails again: V's failures, made
// after its probe, held and counted in the generation the probe closed,
// reopen the fleet within a couple of flush intervals, though no other
// replica makes a call. Run several times: the order of V's flush answer
// and the Watch message of the close varies.
func TestReview155VouchedFailuresReopenTheFleet(t *testing.T) {
	review155Reopen(t, 1, 0)
}

// ... with HalfOpenRequests 3, and with V behind a slow link (20 ms each
// way, flush interval 50 ms).
func TestReview155VouchedFailuresReopenTheFleetVariants(t *testing.T) {
	t.Run("halfopen3", func(t *testing.T) { review155Reopen(t, 3, 0) })
	t.Run("slowlink", func(t *testing.T) { review155Reopen(t, 1, 20*time.Millisecond) })
}

func review155Reopen(t *testing.T, halfOpen uint32, delay time.Duration) {
	f := newFleet155(t, "reopen", halfOpen)
	f.vouch()
	f.proxy.Delay(delay)
	for i := range int(halfOpen) { // the probes
		if err := f.call(f.v); err != nil {
			t.Fatalf("V's probe %d: %v", i, err)
		}
	}
	f.failing.Store(true)
	t0 := time.Now()
	fails := 0
	for range 10 {
		if err := f.call(f.v); errors.Is(err, errDep155) {
			fails++
		}
		time.Sleep(3 * time.Millisecond)
	}
	deadline := 1500 * time.Millisecond
	f.waitFor("the fleet reopens (R2 hears it)", deadline, func() bool { return f.r2.FleetState() == resilience.StateOpen })
	closed := f.r2rec.first(t0.Add(-time.Second), fleetTo155(resilience.StateClosed))
	opened := f.r2rec.first(t0, fleetTo155(resilience.StateOpen))
	t.Logf("V failures %d; fleet closed %v after the first failure, reopened %v after it", fails, closed.Sub(t0), opened.Sub(t0))
	if closed.IsZero() {
		t.Fatalf("R2 never heard the fleet close")
	}
	if bound := 4*f.flush + 2*delay; opened.Sub(t0) > bound+50*time.Millisecond {
		t.Errorf("reopened %v after V's failures began, bound %v (a couple of flush intervals)", opened.Sub(t0), bound)
	}
	// R3 hears the reopening on its own subscription, which can come a
	// little after R2's on a loaded machine (ci, stop 53).
	f.waitFor("the fleet reopens (R3 hears it)", deadline, func() bool { return f.r3.FleetState() == resilience.StateOpen })
	if err := f.call(f.r3); !breaker.IsRejection(err) {
		t.Errorf("R3's call after the reopening: %v, want a rejection", err)
	}
	review155CheckTTLs(t, f.admin, f.prefix+"{"+f.name+"}")
}

// TestReview155HeldCountsNotInARestoredGeneration: promise (1). V probes
// and makes more calls while cut off; Redis is killed and restarted empty
// before V's flush carries the probe: the fleet is restored under a new
// generation, which ended none, and V's held calls must not count in it.
func TestReview155HeldCountsNotInARestoredGeneration(t *testing.T) {
	for _, wait := range []time.Duration{100 * time.Millisecond, 600 * time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			f := newFleet155(t, "restored", 1)
			f.vouch()
			f.proxy.Cut()
			if err := f.call(f.v); err != nil { // the probe
				t.Fatalf("V's probe: %v", err)
			}
			held := 0
			for range 3 {
				if f.call(f.v) == nil {
					held++
				}
			}
			f.srv.Kill()
			time.Sleep(wait) // down that long: R2, R3 restore the fleet half-open if wait < OpenTimeout (they still confirm it), else closed
			f.srv.Restart()
			time.Sleep(300 * time.Millisecond)
			f.proxy.Heal()
			healed := time.Now()
			f.waitFor("V restored", 2*time.Second, func() bool {
				return !f.vrec.first(healed, func(e resilience.Event) bool { return e.Kind == resilience.EventSharedStateRestored }).IsZero()
			})
			time.Sleep(6 * f.flush) // V's next flushes
			st := f.status()
			t.Logf("held %d; fleet after: %+v", held, st)
			if st.Requests != 0 {
				t.Errorf("the restored fleet counts %d requests; nobody called since the restart but V's %d held calls of the half-open generation before it", st.Requests, held)
			}
		})
	}
}

// review155CheckTTLs: every key of the breaker but :force/:forcev expires,
// within a day.
func review155CheckTTLs(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, key+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatalf("no key under %q", key)
	}
	sawPrev := false
	for _, k := range keys {
		if strings.HasSuffix(k, ":force") || strings.HasSuffix(k, ":forcev") || strings.HasSuffix(k, ":changes") {
			continue
		}
		if strings.HasSuffix(k, ":prev") {
			sawPrev = true
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 24*time.Hour {
			t.Errorf("key %q: TTL %v", k, ttl)
		}
	}
	if !sawPrev {
		t.Logf("no :prev key among %v", keys)
	}
}
