package breakerstore_test

// review148: the fleet's vouching against a real redis-server of the
// test's own, frozen (SIGSTOP) then thawed, or killed and restarted empty,
// with several replicas in one process, each with its own client, and a
// dependency of the test's that counts the calls reaching it.

import (
	"context"
	"errors"
	"fmt"
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

var errR148Down = resilience.Terminal(errors.New("review148: dependency down"))

type r148Dep struct {
	failing atomic.Bool
}

type r148Replica struct {
	name     string
	b        *breaker.Breaker
	every    time.Duration
	calls    atomic.Int64 // reached the dependency
	fails    atomic.Int64 // reached it while it failed
	rejected atomic.Int64
	okAlone  atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	rejAt    []time.Duration // rejections, from t0
	sendAt   []time.Duration // calls to the failing dependency, from t0
}

func r148Client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// r148Start makes a replica of breaker name on its own client, calling the
// dependency every every.
func r148Start(t *testing.T, addr, prefix, name, who string, every time.Duration, dep *r148Dep, t0 time.Time, opts ...breaker.Option) *r148Replica {
	store := breakerstore.New(r148Client(t, addr), prefix)
	o := append([]breaker.Option{breaker.Shared(store), breaker.FlushInterval(100 * time.Millisecond),
		breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(5),
		breaker.Window(10*time.Second, 10)}, opts...)
	r := &r148Replica{name: who, b: breaker.New(name, o...), every: every, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { _ = r.b.Close() })
	go func() {
		defer close(r.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-tk.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			err := r.b.Execute(ctx, func(context.Context) error {
				r.calls.Add(1)
				if dep.failing.Load() {
					r.fails.Add(1)
					r.mu.Lock()
					r.sendAt = append(r.sendAt, time.Since(t0))
					r.mu.Unlock()
					return errR148Down
				}
				return nil
			})
			cancel()
			if breaker.IsRejection(err) {
				r.rejected.Add(1)
				r.mu.Lock()
				r.rejAt = append(r.rejAt, time.Since(t0))
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func (r *r148Replica) halt() {
	close(r.stop)
	<-r.done
}

// rejectionsAfter counts the rejections at or after d from t0.
func (r *r148Replica) rejectionsAfter(d time.Duration) (n int, first time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.rejAt {
		if at >= d {
			if n == 0 {
				first = at
			}
			n++
		}
	}
	return n, first
}

func (r *r148Replica) failingSendsAfter(d time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.sendAt {
		if at >= d {
			n++
		}
	}
	return n
}

func r148Fleet(t *testing.T, b *breaker.Breaker) breaker.FleetStatus {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := b.Fleet(ctx)
	if err != nil {
		t.Logf("Fleet: %v", err)
	}
	return st
}

// waitFleet waits up to d for the fleet (as the store holds it) to be in
// state want under a generation other than not, and returns how long it took
// (-1: never).
func r148WaitFleet(t *testing.T, b *breaker.Breaker, want resilience.State, not uint64, d time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < d {
		if st := r148Fleet(t, b); st.State == want && st.Generation != not {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return -1
}

// r148OpenFleet has the dependency fail until the fleet opens.
func r148OpenFleet(t *testing.T, dep *r148Dep, b *breaker.Breaker) uint64 {
	dep.failing.Store(true)
	if r148WaitFleet(t, b, resilience.StateOpen, 0, 3*time.Second) < 0 {
		t.Fatalf("the fleet did not open: %+v", r148Fleet(t, b))
	}
	return r148Fleet(t, b).Generation
}

// Promise (2): the store thawed after the dependency came back and the
// replicas decided alone, the dependency fails again just after: the
// replicas that vouch send it no more than each would deciding alone
// (ConsecutiveFailures 5, then one probe per OpenTimeout of 1 s: 7 in
// 1.5 s), and the fleet reopens promptly.
func TestReview148ThawedVouchersFacingAFailingDependency(t *testing.T) {
	for _, after := range []time.Duration{0, 30 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(fmt.Sprintf("failsAfter%v", after), func(t *testing.T) { r148ThawedFacingFailure(t, after) })
	}
}

func r148ThawedFacingFailure(t *testing.T, after time.Duration) {
	srv := redistest.Start(t, "--appendonly", "no")
	dep := &r148Dep{}
	t0 := time.Now()
	name := fmt.Sprintf("r148-thaw-%d", time.Now().UnixNano())
	var rs []*r148Replica
	for i, every := range []time.Duration{5 * time.Millisecond, 7 * time.Millisecond, 250 * time.Millisecond} {
		rs = append(rs, r148Start(t, srv.Addr(), "", name, fmt.Sprintf("r%d", i), every, dep, t0))
	}
	gen := r148OpenFleet(t, dep, rs[0].b)
	time.Sleep(200 * time.Millisecond)
	srv.Freeze()
	dep.failing.Store(false)
	time.Sleep(2500 * time.Millisecond) // the replicas decide alone after 1 s, and serve
	for _, r := range rs {
		t.Logf("%s during the freeze: fleet %v own %v", r.name, r.b.FleetState(), r.b.Counts())
	}
	srv.Thaw()
	thaw := time.Since(t0)
	time.Sleep(after) // a flush: the replicas vouch
	for _, r := range rs {
		t.Logf("%s after the thaw: FleetState %v", r.name, r.b.FleetState())
	}
	st := r148Fleet(t, rs[0].b)
	t.Logf("store after the thaw: %+v (opened in gen %d)", st, gen)
	failAt := time.Since(t0)
	dep.failing.Store(true)
	reopen := r148WaitFleet(t, rs[0].b, resilience.StateOpen, st.Generation, 1500*time.Millisecond)
	time.Sleep(max(1500*time.Millisecond-reopen, 0))
	for _, r := range rs {
		r.halt()
	}
	t.Logf("thawed at %v, dependency failing from %v, fleet open again %v after", thaw, failAt, reopen)
	for _, r := range rs {
		n := r.failingSendsAfter(failAt)
		t.Logf("%s: %d calls to the failing dependency in 1.5 s", r.name, n)
		if n > 7 {
			t.Errorf("%s sent %d calls to the failing dependency in 1.5 s; deciding alone it would send at most 5 + 2 probes", r.name, n)
		}
	}
	if st.State == resilience.StateClosed && st.Generation != gen {
		return // the fleet closed before the failure: a new opening is the rule's
	}
	if reopen < 0 || reopen > 400*time.Millisecond {
		t.Errorf("the fleet reopened %v after the dependency failed again (bound 400 ms)", reopen)
	}
}

// Promise (1): Redis frozen while the fleet is open, the dependency back
// meanwhile, then thawed: no replica that served the dependency alone
// (its own breaker closed) has a call refused after the thaw, busy or
// rare; and the fleet closes within a few flushes of the thaw (3).
func TestReview148ThawNoHarmBusyAndRare(t *testing.T) {
	for _, h := range []uint32{1, 3} {
		t.Run(fmt.Sprintf("HalfOpenRequests%d", h), func(t *testing.T) {
			srv := redistest.Start(t, "--appendonly", "no")
			dep := &r148Dep{}
			t0 := time.Now()
			name := fmt.Sprintf("r148-norefuse-%d", time.Now().UnixNano())
			var rs []*r148Replica
			for i, every := range []time.Duration{3 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
				rs = append(rs, r148Start(t, srv.Addr(), "", name, fmt.Sprintf("r%d", i), every, dep, t0, breaker.HalfOpenRequests(h)))
			}
			gen := r148OpenFleet(t, dep, rs[0].b)
			time.Sleep(100 * time.Millisecond)
			srv.Freeze()
			dep.failing.Store(false)
			time.Sleep(3 * time.Second)
			srv.Thaw()
			thaw := time.Since(t0)
			closed := r148WaitFleet(t, rs[0].b, resilience.StateClosed, gen, 2*time.Second)
			time.Sleep(max(1500*time.Millisecond-closed, 300*time.Millisecond))
			for _, r := range rs {
				r.halt()
			}
			t.Logf("thawed at %v; fleet closed %v after", thaw, closed)
			if closed < 0 || closed > time.Second {
				t.Errorf("fleet closed %v after the thaw (want within 1 s: OpenTimeout passed long ago)", closed)
			}
			for _, r := range rs {
				n, first := r.rejectionsAfter(thaw)
				t.Logf("%s (every %v): %d calls reached the dependency, %d rejected after the thaw (first at %v)", r.name, r.every, r.calls.Load(), n, first)
				if n > 0 {
					t.Errorf("%s (every %v): %d calls refused after the thaw, the dependency healthy (first %v after it)", r.name, r.every, n, first-thaw)
				}
			}
		})
	}
}

// Promise (1): Redis killed while the fleet is open, restarted empty after
// the dependency came back and the replicas decided alone: no call
// refused after the restart.
func TestReview148RestartedEmptyNoHarm(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	dep := &r148Dep{}
	t0 := time.Now()
	name := fmt.Sprintf("r148-empty-%d", time.Now().UnixNano())
	var rs []*r148Replica
	for i, every := range []time.Duration{3 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		rs = append(rs, r148Start(t, srv.Addr(), "", name, fmt.Sprintf("r%d", i), every, dep, t0))
	}
	r148OpenFleet(t, dep, rs[0].b)
	time.Sleep(100 * time.Millisecond)
	srv.Kill()
	dep.failing.Store(false)
	time.Sleep(2 * time.Second)
	srv.Restart()
	back := time.Since(t0)
	time.Sleep(1500 * time.Millisecond)
	for _, r := range rs {
		r.halt()
	}
	st := r148Fleet(t, rs[0].b)
	t.Logf("store after: %+v", st)
	if st.State != resilience.StateClosed {
		t.Errorf("fleet %v 1.5 s after the restart, dependency healthy", st.State)
	}
	for _, r := range rs {
		n, first := r.rejectionsAfter(back)
		t.Logf("%s: %d rejected after the restart", r.name, n)
		if n > 0 {
			t.Errorf("%s (every %v): %d calls refused after the restart, the dependency healthy (first %v after it)", r.name, r.every, n, first-back)
		}
	}
}

// r148FlakySync is the Redis store whose Sync fails while failing is set,
// its Watch (pub/sub) working all along.
type r148FlakySync struct {
	*breakerstore.Store
	failing atomic.Bool
}

func (s *r148FlakySync) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	if s.failing.Load() {
		return breaker.Fleet{}, errors.New("review148: flush lost")
	}
	return s.Store.Sync(ctx, name, sy)
}

// Promise (1) and (3), pub/sub working while one replica's flushes fail:
// replica A's flushes fail from just after the fleet opened; the
// dependency comes back; the other replicas are idle. A decides alone and
// serves; when its flushes get through again, A refuses nothing and the
// fleet closes within a few flush intervals.
func TestReview148PubSubUpFlushesDownThenBack(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	dep := &r148Dep{}
	t0 := time.Now()
	name := fmt.Sprintf("r148-pubsub-%d", time.Now().UnixNano())
	flaky := &r148FlakySync{Store: breakerstore.New(r148Client(t, srv.Addr()), "")}
	a := &r148Replica{name: "A", every: 5 * time.Millisecond, stop: make(chan struct{}), done: make(chan struct{})}
	a.b = breaker.New(name, breaker.Shared(flaky), breaker.FlushInterval(100*time.Millisecond),
		breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(5),
		breaker.Window(10*time.Second, 10))
	t.Cleanup(func() { _ = a.b.Close() })
	// The other replica only opens the fleet, then goes idle.
	other := r148Start(t, srv.Addr(), "", name, "B", 5*time.Millisecond, dep, t0, breaker.ConsecutiveFailures(0))
	gen := r148OpenFleet(t, dep, other.b)
	other.halt()
	time.Sleep(300 * time.Millisecond) // A hears it (pub/sub or flush)
	if a.b.FleetState() != resilience.StateOpen {
		t.Fatalf("A: fleet %v, want open", a.b.FleetState())
	}
	flaky.failing.Store(true)
	dep.failing.Store(false)
	go func() {
		defer close(a.done)
		for {
			select {
			case <-a.stop:
				return
			case <-time.After(a.every):
			}
			err := a.b.Execute(context.Background(), func(context.Context) error {
				a.calls.Add(1)
				if dep.failing.Load() {
					return errR148Down
				}
				return nil
			})
			if breaker.IsRejection(err) {
				a.rejected.Add(1)
				a.mu.Lock()
				a.rejAt = append(a.rejAt, time.Since(t0))
				a.mu.Unlock()
			}
		}
	}()
	time.Sleep(2500 * time.Millisecond)
	flaky.failing.Store(false)
	back := time.Since(t0)
	closed := r148WaitFleet(t, other.b, resilience.StateClosed, gen, 2*time.Second)
	time.Sleep(500 * time.Millisecond)
	a.halt()
	n, first := a.rejectionsAfter(back)
	t.Logf("A: %d calls, %d refused after its flushes came back (first %v after); fleet closed %v after", a.calls.Load(), n, first-back, closed)
	if n > 0 {
		t.Errorf("A refused %d calls to a healthy dependency after its flushes came back", n)
	}
	if closed < 0 || closed > 500*time.Millisecond {
		t.Errorf("fleet closed %v after A's flushes came back (want within 500 ms)", closed)
	}
}

// r148LoseOne is the Redis store whose Sync fails failNext more times
// (a flush lost), counting the Syncs that ended.
type r148LoseOne struct {
	*breakerstore.Store
	failNext atomic.Int32
	ended    atomic.Int64
}

func (s *r148LoseOne) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	defer s.ended.Add(1)
	if s.failNext.Add(-1) >= 0 {
		return breaker.Fleet{}, errors.New("review148: flush lost")
	}
	s.failNext.Store(0)
	return s.Store.Sync(ctx, name, sy)
}

func (s *r148LoseOne) waitSyncs(t *testing.T, n int64) {
	from := s.ended.Load()
	deadline := time.Now().Add(2 * time.Second)
	for s.ended.Load() < from+n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d flushes in 2 s", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The refill of a vouching replica's own probes at a rejoin, on a real
// Redis: HalfOpenRequests 3; Redis frozen while the fleet is open, the
// dependency back, the replica serving alone; thawed, the replica vouches.
// Its calls: success (reported), one flush lost, success, the flush after
// (a rejoin), success, then one failure. Its first three calls in the
// half-open state succeeded: the fleet must close, not reopen.
func TestReview148RealRedisLostFlushAfterVouchReopens(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	dep := &r148Dep{}
	t0 := time.Now()
	name := fmt.Sprintf("r148-refill-%d", time.Now().UnixNano())
	st := &r148LoseOne{Store: breakerstore.New(r148Client(t, srv.Addr()), "")}
	a := breaker.New(name, breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
		breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(5),
		breaker.Window(10*time.Second, 10), breaker.HalfOpenRequests(3))
	t.Cleanup(func() { _ = a.Close() })
	other := r148Start(t, srv.Addr(), "", name, "B", 5*time.Millisecond, dep, t0, breaker.ConsecutiveFailures(0), breaker.HalfOpenRequests(3))
	gen := r148OpenFleet(t, dep, other.b)
	other.halt()
	time.Sleep(200 * time.Millisecond)
	srv.Freeze()
	dep.failing.Store(false)
	call := func() error {
		return a.Execute(context.Background(), func(context.Context) error {
			if dep.failing.Load() {
				return errR148Down
			}
			return nil
		})
	}
	for range 25 { // 2.5 s, alone after 1 s
		_ = call()
		time.Sleep(100 * time.Millisecond)
	}
	srv.Thaw()
	st.waitSyncs(t, 2)
	fs := r148Fleet(t, a)
	if a.FleetState() != resilience.StateClosed || fs.State != resilience.StateHalfOpen || fs.Generation != gen {
		t.Skipf("not vouching in a half-open fleet: FleetState %v, store %+v (gen %d)", a.FleetState(), fs, gen)
	}
	if err := call(); err != nil { // probe 1
		t.Fatal(err)
	}
	st.waitSyncs(t, 1)
	st.failNext.Store(1)
	st.waitSyncs(t, 1)             // lost
	if err := call(); err != nil { // probe 2
		t.Fatal(err)
	}
	st.waitSyncs(t, 1)             // the rejoin
	if err := call(); err != nil { // probe 3
		t.Fatal(err)
	}
	dep.failing.Store(true)
	_ = call() // the 4th call
	dep.failing.Store(false)
	st.waitSyncs(t, 2)
	after := r148Fleet(t, a)
	rejected := 0
	for range 20 {
		if err := call(); breaker.IsRejection(err) {
			rejected++
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("fleet before %+v, after %+v; %d of 20 calls refused in the next 0.4 s", fs, after, rejected)
	if after.State == resilience.StateOpen {
		t.Errorf("the fleet reopened on the 4th call's failure, the replica's first 3 calls in the half-open state having succeeded; %d of 20 calls then refused", rejected)
	}
}

// review147's rule on a real Redis, pub/sub working while the flushes of
// replica A fail: A, busy (4 callers in a tight loop), decides alone in a
// closed fleet; replica B's failing calls open the fleet, published; A's
// dependency fails 2 ms after the opening, and A's flushes get through 30
// ms after it. A heard the opening and made no call alone in it: it must
// send the failing dependency nothing once its flushes are back. 5
// rounds, a breaker name each.
func TestReview148RealRedisOpeningHeardWhileBusyNoVouch(t *testing.T) {
	for _, consecutive := range []uint32{5, 0} {
		t.Run(fmt.Sprintf("ConsecutiveFailures%d", consecutive), func(t *testing.T) { r148OpeningHeardWhileBusy(t, consecutive) })
	}
}

func r148OpeningHeardWhileBusy(t *testing.T, consecutive uint32) {
	srv := redistest.Start(t, "--appendonly", "no")
	bad := 0
	for round := range 5 {
		name := fmt.Sprintf("r148-busy-%d-%d", round, time.Now().UnixNano())
		flaky := &r148FlakySync{Store: breakerstore.New(r148Client(t, srv.Addr()), "")}
		a := breaker.New(name, breaker.Shared(flaky), breaker.FlushInterval(20*time.Millisecond),
			breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(consecutive),
			breaker.Window(10*time.Second, 10))
		bStore := breakerstore.New(r148Client(t, srv.Addr()), "")
		b := breaker.New(name, breaker.Shared(bStore), breaker.FlushInterval(20*time.Millisecond),
			breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(0),
			breaker.Window(10*time.Second, 10))
		var aFailing atomic.Bool
		// Calls started once the flushes came back that reached the
		// failing dependency: a call admitted before, whose goroutine a
		// loaded machine held back, is not one (ci167).
		var sent atomic.Int64
		var restored atomic.Int64 // when the flushes came back, UnixNano; 0 before
		stop := make(chan struct{})
		var wg sync.WaitGroup
		time.Sleep(50 * time.Millisecond) // A has heard the closed fleet
		flaky.failing.Store(true)         // A's counts never reach the store: B opens the fleet at once
		time.Sleep(60 * time.Millisecond)
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					began := time.Now().UnixNano()
					_ = a.Execute(context.Background(), func(context.Context) error {
						if aFailing.Load() {
							if r := restored.Load(); r != 0 && began > r {
								sent.Add(1)
							}
							return errR148Down
						}
						return nil
					})
				}
			})
		}
		time.Sleep(100 * time.Millisecond) // A decides alone, in the closed fleet
		bStart := time.Now()
		for i := 0; a.FleetState() == resilience.StateClosed && b.FleetState() == resilience.StateClosed; i++ {
			_ = b.Execute(context.Background(), func(context.Context) error { return errR148Down })
			if i%20 == 19 {
				time.Sleep(time.Millisecond)
			}
		}
		opened := time.Now()
		t.Logf("round %d: B opened the fleet in %v (A %v, B %v)", round, opened.Sub(bStart), a.FleetState(), b.FleetState())
		for a.FleetState() != resilience.StateOpen && time.Since(opened) < 200*time.Millisecond {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond)
		aFailing.Store(true)
		time.Sleep(28 * time.Millisecond)
		restored.Store(time.Now().UnixNano())
		flaky.failing.Store(false)
		time.Sleep(200 * time.Millisecond)
		after := sent.Load()
		st := r148Fleet(t, b)
		close(stop)
		wg.Wait()
		_ = a.Close()
		_ = b.Close()
		t.Logf("round %d: %d calls sent by A to the failing dependency after its flushes came back; fleet %v", round, after, st.State)
		if after > 0 && st.State != resilience.StateClosed {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("in %d of 5 rounds A vouched against an opening heard by Watch 30 ms before its flushes came back, sending calls to the failing dependency", bad)
	}
}
