package idempotency

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Promise (3): a store that reads but refuses writes: keys it holds are
// replayed (or 409) before and after failing open; nothing runs twice on
// one replica; the guard returns to the store once it accepts writes.

// The store refuses writes (reads served) and freezes for a moment just
// as the guard crosses FailOpenAfter: the failure that fails it open is a
// timeout, which (not yet open) clears `refusing`, so the guard opens
// believing the store down and runs the keys the store holds again until
// the next probe.
func TestReview152TimeoutAtTheMomentOfFailingOpenRunsStoredKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		if got := r152Run(g, "held"); got != "ran" {
			t.Fatalf("held: %s", got)
		}
		var mode atomic.Int64
		mode.Store(r152Refuse)
		s.setBegin(func(string) int { return int(mode.Load()) })
		t0 := time.Now()
		for time.Since(t0) < 9700*time.Millisecond {
			r152Run(g, fmt.Sprintf("n%v", time.Since(t0)))
			time.Sleep(200 * time.Millisecond)
		}
		mode.Store(r152Hang) // frozen 800 ms, OOM before and after
		thawed := time.Now().Add(800 * time.Millisecond)
		time.AfterFunc(800*time.Millisecond, func() { mode.Store(r152Refuse) })
		first := r152Run(g, "new-during-freeze")
		// A key asked while the store does not answer at all runs, as for
		// any store down once the guard has failed open; from the thaw the
		// store answers again, and what it holds is replayed.
		time.Sleep(time.Until(thawed))
		var ranAgain []string
		for i := 0; i < 5; i++ {
			if got := r152Run(g, "held"); got != "replayed" {
				ranAgain = append(ranAgain, fmt.Sprintf("t=%v:%s", time.Since(t0).Round(10*time.Millisecond), got))
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("opened=%d first=%s", opened.Load(), first)
		// The guard's probe during the freeze timed out, which ends its
		// asking the store first (see the slow probe's test below): one
		// run again here, then replayed from this replica's records.
		if len(ranAgain) > 1 {
			t.Errorf("a key the (reading) store holds ran again on this replica: %v", ranAgain)
		}
		s.setBegin(nil)
		time.Sleep(10 * time.Second)
		for i := range 5 {
			r152Run(g, fmt.Sprintf("end%d", i))
			time.Sleep(time.Second)
		}
	})
}

// Failed open on a refusing store; one probe is slow (a 350 ms freeze as
// it asks): `refusing` is cleared by the probe's timeout, and until the
// next probe every stored key runs again.
func TestReview152SlowProbeAmongRefusalsRunsStoredKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		if got := r152Run(g, "held"); got != "ran" {
			t.Fatalf("held: %s", got)
		}
		var hangProbe atomic.Bool
		s.setBegin(func(key string) int {
			if key == probeKey && hangProbe.CompareAndSwap(true, false) {
				return r152Hang
			}
			return r152Refuse
		})
		t0 := time.Now()
		for time.Since(t0) < 13*time.Second {
			r152Run(g, fmt.Sprintf("n%v", time.Since(t0)))
			time.Sleep(200 * time.Millisecond)
		}
		if opened.Load() == 0 {
			t.Fatal("not failed open after 13 s of refusals")
		}
		if got := r152Run(g, "held"); got != "replayed" {
			t.Fatalf("before the slow probe, held: %s", got)
		}
		hangProbe.Store(true)
		var ranAgain []string
		for time.Since(t0) < 16*time.Second {
			if got := r152Run(g, "held"); got != "replayed" {
				ranAgain = append(ranAgain, fmt.Sprintf("t=%v:%s", time.Since(t0).Round(10*time.Millisecond), got))
			}
			time.Sleep(100 * time.Millisecond)
		}
		// A probe's timeout ends the guard's asking the store first (it may
		// hang: requests failed open are not to wait on it each), until the
		// next probe finds it refusing again: a key the store holds, asked
		// meanwhile, runs once more here, as for a store that does not
		// answer, and its repeats are replayed from this replica's records.
		if len(ranAgain) > 1 {
			t.Errorf("one slow probe among refusals: a key the store holds ran again on this replica %d times: %v", len(ranAgain), ranAgain)
		}
		s.setBegin(nil)
		time.Sleep(10 * time.Second)
		for i := range 5 {
			r152Run(g, fmt.Sprintf("end%d", i))
			time.Sleep(time.Second)
		}
	})
}

// A result the refusing store would not save for a lease, while the guard
// had not failed open (no other keyed request then): not kept locally;
// once the guard has failed open (later requests), the repeat runs again
// on the same replica.
func TestReview152ResultRefusedBeforeFailingOpenRunsAgainAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		ctx := context.Background()
		c, _, err := g.Begin(ctx, "s", "r", "fp")
		if err != nil || c == nil {
			t.Fatalf("begin: %v", err)
		}
		// OOM: claims and saves refused; renewals (PEXPIRE) pass.
		s.setBegin(func(string) int { return r152Refuse })
		s.setWrite(func(op, _ string) int {
			if op == "complete" {
				return r152Refuse
			}
			return r152OK
		})
		err = c.Complete(ctx, Record{Status: 201, Body: []byte("created")})
		t.Logf("complete after %v: %v", time.Since(c.LeaseDeadline()), err)
		if err == nil {
			t.Fatal("saved on a refusing store?")
		}
		time.Sleep(35 * time.Second) // the claim's lease runs out on the store
		for i := range 8 {           // traffic resumes: new keys, refused, the guard fails open
			r152Run(g, fmt.Sprintf("n%d", i))
			time.Sleep(2 * time.Second)
		}
		got := r152Run(g, "r")
		t.Logf("opened=%d repeat of r: %s", opened.Load(), got)
		if got == "ran" || got == "ran-local" {
			t.Errorf("the request whose result the refusing store would not save ran again on the same replica (%s)", got)
		}
		s.setBegin(nil)
		s.setWrite(nil)
		time.Sleep(10 * time.Second)
		for i := range 5 {
			r152Run(g, fmt.Sprintf("end%d", i))
			time.Sleep(time.Second)
		}
	})
}

// Refusing, failed open: a key the store holds in flight elsewhere is 409;
// a key run locally is replayed; once writes are accepted, the guard goes
// back to the store within a few seconds, and the locally-run key is
// still replayed on this replica.
func TestReview152RefusingThenAcceptingReturnsToStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		other := NewGuard(s)
		ctx := context.Background()
		oc, _, err := other.Begin(ctx, "s", "elsewhere", "fp") // in flight on another replica
		if err != nil || oc == nil {
			t.Fatal(err)
		}
		s.setBegin(func(string) int { return r152Refuse })
		s.setWrite(func(op, _ string) int {
			if op == "renew" {
				return r152OK
			}
			return r152Refuse
		})
		t0 := time.Now()
		for time.Since(t0) < 12*time.Second {
			r152Run(g, fmt.Sprintf("n%v", time.Since(t0)))
			time.Sleep(300 * time.Millisecond)
		}
		if opened.Load() == 0 {
			t.Fatal("not failed open")
		}
		if _, _, err := g.Begin(ctx, "s", "elsewhere", "fp"); err != ErrInProgress {
			t.Errorf("in flight elsewhere, failed open on a refusing store: %v, want ErrInProgress", err)
		}
		if got := r152Run(g, "mine"); got != "ran-local" {
			t.Errorf("mine: %s", got)
		}
		if got := r152Run(g, "mine"); got != "replayed" {
			t.Errorf("mine again: %s", got)
		}
		s.setBegin(nil)
		s.setWrite(nil)
		back := time.Now()
		var onStoreAt time.Duration = -1
		for i := 0; time.Since(back) < 10*time.Second; i++ {
			if got := r152Run(g, fmt.Sprintf("b%d", i)); got == "ran" && onStoreAt < 0 {
				onStoreAt = time.Since(back)
			}
			time.Sleep(700 * time.Millisecond)
		}
		if onStoreAt < 0 || onStoreAt > 4*time.Second || g.out.isOpen() {
			t.Errorf("writes accepted again: back on the store after %v (open now %v)", onStoreAt, g.out.isOpen())
		}
		if got := r152Run(g, "mine"); got != "replayed" {
			t.Errorf("mine after the store is back: %s", got)
		}
		_ = oc.Complete(ctx, Record{Status: 200})
	})
}
