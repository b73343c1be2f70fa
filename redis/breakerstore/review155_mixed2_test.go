package breakerstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// oldStore155 is a replica of the version before the change: the old
// script, no Watch.
type oldStore155 struct {
	c      redis.UniversalClient
	prefix string
}

func (s oldStore155) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	return review155OldSync(ctx, s.c, s.prefix, name, sy)
}

// TestReview155MixedFleetCountsHeldCallsInALaterClosing: promise (1), end
// to end, in a rolling upgrade. V (this version) vouches in the half-open
// generation G, probes, and is cut off, making more calls (held, of G).
// R3 (this version) probes and closes G (:prev = G). An old replica O
// then opens and closes the fleet twice over (G2 open, G3 closed) with
// the old script, which leaves :prev at G. V comes back: the store says
// the last change ended G, and V counts its calls of half-open G in G3,
// a closing two changes later. Only O called in G3: V must add nothing
// to its totals.
func TestReview155MixedFleetCountsHeldCallsInALaterClosing(t *testing.T) {
	f := newFleet155(t, "mixed-e2e", 1)
	oc := redis.NewClient(&redis.Options{Addr: f.srv.Addr(), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = oc.Close() })
	orec := &rec155{}
	o := breaker.New(f.name,
		breaker.Shared(oldStore155{oc, f.prefix}),
		breaker.FailureRate(0.5, 4), breaker.Window(5*time.Second, 5),
		breaker.OpenTimeout(f.openT), breaker.FlushInterval(f.flush),
		breaker.HalfOpenRequests(1),
		breaker.WithListener(resilience.ListenerFunc(orec.add)))
	t.Cleanup(func() { _ = o.Close() })

	f.vouch()
	f.proxy.Cut()
	if err := f.call(f.v); err != nil { // V's probe
		t.Fatalf("V's probe: %v", err)
	}
	held := 0
	for range 7 {
		if f.call(f.v) == nil {
			held++
		}
		time.Sleep(5 * time.Millisecond)
	}
	key := f.prefix + "{" + f.name + "}"
	gOf := func() string { return f.admin.Get(context.Background(), key+":gen").Val() }
	g := gOf()
	// R3 probes and closes G.
	f.waitFor("R3's probe closes G", 3*time.Second, func() bool {
		_ = f.call(f.r3)
		time.Sleep(10 * time.Millisecond)
		return f.status().State == resilience.StateClosed
	})
	if p := f.admin.Get(context.Background(), key+":prev").Val(); !strings.HasPrefix(p, g+" ") { // "prev next" since the fix
		t.Fatalf(":prev %q after R3 closed G %q", p, g)
	}
	// O opens (old script) and closes (old script).
	f.failing.Store(true)
	f.waitFor("O opens the fleet", 3*time.Second, func() bool {
		_ = f.call(o)
		time.Sleep(5 * time.Millisecond)
		return f.status().State == resilience.StateOpen
	})
	f.failing.Store(false)
	f.waitFor("O's probe closes the fleet", 5*time.Second, func() bool {
		_ = f.call(o)
		time.Sleep(10 * time.Millisecond)
		return f.status().State == resilience.StateClosed
	})
	g3 := gOf()
	prev := f.admin.Get(context.Background(), key+":prev").Val()
	// O's loop may have made a call after its probe closed the fleet:
	// that call is O's, of G3. Let O's flushes land, then take the
	// fleet's count without V as the baseline.
	time.Sleep(4 * f.flush)
	before := f.status()
	t.Logf("G %s, now %s, :prev %s; V held %d calls; G3 counts %d before V comes back", g, g3, prev, held, before.Requests)
	f.proxy.Heal()
	healed := time.Now()
	f.waitFor("V restored", 2*time.Second, func() bool {
		return !f.vrec.first(healed, func(e resilience.Event) bool { return e.Kind == resilience.EventSharedStateRestored }).IsZero()
	})
	time.Sleep(6 * f.flush)
	st := f.status()
	t.Logf("fleet: %+v", st)
	if gOf() != g3 {
		t.Fatalf("the fleet changed again (%s), inconclusive", gOf())
	}
	if st.Requests != before.Requests {
		t.Errorf("closing %s counts %d requests (%d before V came back): V's held calls of half-open %s (%d), two changes before (stale :prev %s left by an old replica's script)", g3, st.Requests, before.Requests, g, held, prev)
	}
}

// TestReview155MixedFleetReopensOnStaleFailures: the harm, as in
// review153. V vouches in half-open G, probes, and is cut off; the
// dependency fails again, V's calls fail (held, of G). R3's granted probe
// fails: the fleet opens (G2, :prev = G, this version's script). The
// dependency recovers and an old replica's probe closes the fleet (G3,
// old script: :prev still G). V comes back: told the last change ended G,
// it counts its failures of G in G3, and the recovered fleet reopens on a
// dependency that answers; the healthy replicas' calls are refused.
func TestReview155MixedFleetReopensOnStaleFailures(t *testing.T) {
	review155StaleFailures(t, true)
}

// TestReview155SameVersionFleetDoesNotReopen is the control: the same
// run, the fleet closed by a replica of this version. It passes.
func TestReview155SameVersionFleetDoesNotReopen(t *testing.T) {
	review155StaleFailures(t, false)
}

func review155StaleFailures(t *testing.T, oldCloser bool) {
	f := newFleet155(t, "mixed-reopen", 1)
	oc := redis.NewClient(&redis.Options{Addr: f.srv.Addr(), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = oc.Close() })
	o := breaker.New(f.name,
		breaker.Shared(oldStore155{oc, f.prefix}),
		breaker.FailureRate(0.5, 4), breaker.Window(5*time.Second, 5),
		breaker.OpenTimeout(f.openT), breaker.FlushInterval(f.flush),
		breaker.HalfOpenRequests(1))
	t.Cleanup(func() { _ = o.Close() })

	f.vouch()
	f.proxy.Cut()
	if err := f.call(f.v); err != nil { // V's probe
		t.Fatalf("V's probe: %v", err)
	}
	f.failing.Store(true)
	fails := 0
	for range 7 {
		if f.call(f.v) == errDep155 {
			fails++
		}
		time.Sleep(5 * time.Millisecond)
	}
	key := f.prefix + "{" + f.name + "}"
	gOf := func() string { return f.admin.Get(context.Background(), key+":gen").Val() }
	g := gOf()
	f.waitFor("R3's probe fails: the fleet opens", 3*time.Second, func() bool {
		_ = f.call(f.r3)
		time.Sleep(10 * time.Millisecond)
		return gOf() != g && f.status().State == resilience.StateOpen
	})
	f.failing.Store(false)
	closer := o
	if !oldCloser {
		closer = f.r2
	}
	f.waitFor("the closer's probe closes the fleet", 5*time.Second, func() bool {
		_ = f.call(closer)
		time.Sleep(10 * time.Millisecond)
		return f.status().State == resilience.StateClosed
	})
	g3 := gOf()
	t.Logf("G %s, closed as %s, :prev %s; V failed %d calls while cut off", g, g3, f.admin.Get(context.Background(), key+":prev").Val(), fails)
	f.proxy.Heal()
	time.Sleep(8 * f.flush)
	st := f.status()
	refused := 0
	for _, b := range []*breaker.Breaker{f.r2, f.r3, o} {
		if err := f.call(b); breaker.IsRejection(err) {
			refused++
		}
	}
	t.Logf("fleet after V came back: %+v; healthy calls refused %d of 3", st, refused)
	if st.Generation != mustU155(t, g3) || st.State != resilience.StateClosed {
		t.Errorf("the recovered fleet (closed %s) changed to %v %d after V came back, the dependency healthy", g3, st.State, st.Generation)
	}
	if refused > 0 {
		t.Errorf("%d of 3 calls to a healthy dependency refused", refused)
	}
}

func mustU155(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
