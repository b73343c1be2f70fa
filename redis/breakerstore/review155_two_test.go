package breakerstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview155TwoVouchersCountedOnce: promise (1), "several vouching
// replicas each holding counts". V (the fleet's) and W, each behind a
// link of its own, both vouch in half-open G; both are cut off again,
// each makes its probe and 5 more calls (held), and both come back: one
// probe closes G, and the closing counts the 10 held calls, each once.
func TestReview155TwoVouchersCountedOnce(t *testing.T) {
	f := newFleet155(t, "two", 1)
	wproxy := redistest.NewProxy(t, f.srv.Addr())
	wc := redis.NewClient(&redis.Options{Addr: wproxy.Addr(), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = wc.Close() })
	wrec := &rec155{}
	w := breaker.New(f.name,
		breaker.Shared(breakerstore.New(wc, f.prefix)),
		breaker.FailureRate(0.5, 4), breaker.Window(5*time.Second, 5),
		breaker.OpenTimeout(f.openT), breaker.FlushInterval(f.flush),
		breaker.HalfOpenRequests(1),
		breaker.WithListener(resilience.ListenerFunc(wrec.add)))
	t.Cleanup(func() { _ = w.Close() })
	f.waitFor("W hears the fleet", time.Second, func() bool { return w.FleetState() == resilience.StateClosed })

	// vouch() with W cut off beside V: W serves alone too.
	f.failing.Store(true)
	for range 4 {
		_ = f.call(f.r2)
	}
	f.waitFor("fleet open (W)", time.Second, func() bool { return w.FleetState() == resilience.StateOpen })
	wproxy.Cut()
	go func() { // W's own calls while alone, beside V's in vouch()
		end := time.Now().Add(f.openT + 300*time.Millisecond)
		for time.Now().Before(end) {
			_ = f.call(w)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	f.vouch()
	healed := time.Now()
	wproxy.Heal()
	f.waitFor("W restored", 2*time.Second, func() bool {
		return !wrec.first(healed, func(e resilience.Event) bool { return e.Kind == resilience.EventSharedStateRestored }).IsZero()
	})
	if w.FleetState() != resilience.StateClosed || f.status().State != resilience.StateHalfOpen {
		t.Fatalf("W does not vouch (W goes by %v, fleet %v)", w.FleetState(), f.status().State)
	}
	f.proxy.Cut()
	wproxy.Cut()
	n := 0
	for _, b := range []*breaker.Breaker{f.v, w} {
		for i := range 6 {
			if err := f.call(b); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if i > 0 {
				n++
			}
		}
	}
	f.proxy.Heal()
	wproxy.Heal()
	time.Sleep(time.Second)
	st := f.status()
	t.Logf("fleet %+v; held %d", st, n)
	if st.State != resilience.StateClosed {
		t.Fatalf("fleet %v, want closed", st.State)
	}
	if st.Requests != uint64(n) {
		t.Errorf("the closing counts %d requests, want the %d held calls, each once", st.Requests, n)
	}
}
