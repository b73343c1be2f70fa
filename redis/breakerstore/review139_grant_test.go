package breakerstore_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

const (
	r139Open  = 300 * time.Millisecond
	r139Flush = 50 * time.Millisecond
)

func r139Policy() breaker.FleetPolicy {
	return breaker.FleetPolicy{
		Rate: 0.5, MinRequests: 5, Window: 10 * time.Second, Buckets: 10,
		OpenTimeout: r139Open, HalfOpenRequests: 1,
		ProbeTimeout:  max(r139Open, 3*r139Flush),
		FlushInterval: r139Flush,
	}
}

func r139Opts(s breaker.SharedStore) []breaker.Option {
	return []breaker.Option{
		breaker.Shared(s), breaker.FlushInterval(r139Flush),
		breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(r139Open), breaker.HalfOpenRequests(1),
	}
}

// TestReview139KilledProbeHolderDoesNotHoldTheFleet: a replica ("ghost",
// driven by hand) opens the fleet, takes its probe grant as it turns
// half-open, says its probe runs, and dies (kill -9: no more flushes). A
// live replica with calls to a healthy dependency must get the probe
// once the grant expires (ProbeTimeout, the larger of OpenTimeout and
// three flush intervals) and close the fleet, a few flushes after.
func TestReview139KilledProbeHolderDoesNotHoldTheFleet(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	c := srv.Client()
	s := breakerstore.New(c, "r139:")
	ctx := context.Background()
	const name = "killed-holder"
	p := r139Policy()

	f, err := s.Sync(ctx, name, breaker.Sync{Batch: "ghost-1", Requests: 10, Failures: 10, GenerationUnknown: true,
		CountsAge: time.Millisecond, Replica: "ghost", Policy: p})
	if err != nil || f.State != resilience.StateOpen {
		t.Fatalf("setup: %v %+v", err, f)
	}
	gen := f.Generation
	time.Sleep(r139Open + 20*time.Millisecond)
	f, err = s.Sync(ctx, name, breaker.Sync{Generation: gen, State: resilience.StateOpen, OpenedFor: r139Open,
		Replica: "ghost", WantProbe: true, Policy: p})
	if err != nil || f.State != resilience.StateHalfOpen || !f.ProbeGranted {
		t.Fatalf("setup: ghost not granted: %v %+v", err, f)
	}
	f, err = s.Sync(ctx, name, breaker.Sync{Generation: gen, State: resilience.StateHalfOpen, OpenedFor: r139Open,
		Replica: "ghost", ProbeRunning: true, Policy: p})
	if err != nil || !f.ProbeGranted {
		t.Fatalf("setup: ghost's running grant not kept: %v %+v", err, f)
	}
	died := time.Now()

	b := breaker.New(name, r139Opts(s)...)
	defer b.Close()
	// A replica just started goes by a closed fleet until its first flush's
	// answer: wait for it (see TestReview139NewReplicaProbesAnOpenFleet).
	for b.FleetState() == resilience.StateClosed && time.Since(died) < time.Second {
		time.Sleep(time.Millisecond)
	}
	t.Logf("the new replica heard %v %v after", b.FleetState(), time.Since(died))
	var first time.Duration
	for time.Since(died) < 3*time.Second {
		if err := b.Execute(ctx, func(context.Context) error { return nil }); err == nil {
			first = time.Since(died)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	bound := p.ProbeTimeout + 4*r139Flush
	t.Logf("first success %v after the holder died (grant's ProbeTimeout %v)", first, p.ProbeTimeout)
	if first == 0 || first > bound {
		t.Errorf("a killed replica's running grant held the fleet half-open: first success %v after it died, bound %v", first, bound)
	}
	deadline := time.Now().Add(time.Second)
	for b.FleetState() != resilience.StateClosed && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := b.FleetState(); st != resilience.StateClosed {
		t.Errorf("fleet %v a second after the first probe's success", st)
	}
}

// TestReview139NothingLeftAfterClose: breakers that went through an
// opening, a half-open probe and a closing, then closed (Close), leave no
// subscription on the server, and every key they made expires (but the
// forced mode's, never set here).
func TestReview139NothingLeftAfterClose(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	c := srv.Client()
	ctx := context.Background()
	var bs []*breaker.Breaker
	for range 3 {
		bs = append(bs, breaker.New("leak", r139Opts(breakerstore.New(srv.Client(), "r139l:"))...))
	}
	failing := true
	op := func(context.Context) error {
		if failing {
			return context.DeadlineExceeded
		}
		return nil
	}
	end := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(end) {
		for _, b := range bs {
			_ = b.Execute(ctx, op)
		}
		time.Sleep(2 * time.Millisecond)
	}
	failing = false
	end = time.Now().Add(2 * time.Second)
	for time.Now().Before(end) && bs[0].FleetState() != resilience.StateClosed {
		for _, b := range bs {
			_ = b.Execute(ctx, op)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if bs[0].FleetState() != resilience.StateClosed {
		t.Fatalf("setup: fleet %v", bs[0].FleetState())
	}
	for _, b := range bs {
		start := time.Now()
		_ = b.Close()
		if d := time.Since(start); d > 2*r139Flush+50*time.Millisecond {
			t.Errorf("Close took %v", d)
		}
	}
	time.Sleep(100 * time.Millisecond)
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	subs := 0
	for _, l := range strings.Split(list, "\n") {
		if strings.Contains(l, "flags=P") || strings.Contains(l, "sub=1") {
			subs++
		}
	}
	if subs > 0 {
		t.Errorf("%d subscribed connections left after Close:\n%s", subs, list)
	}
	n, err := c.PubSubNumSub(ctx, "r139l:{leak}:changes").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n["r139l:{leak}:changes"] != 0 {
		t.Errorf("%d subscribers left", n["r139l:{leak}:changes"])
	}
	keys, err := c.Keys(ctx, "r139l:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q ttl %v", k, ttl)
		if ttl < 0 || ttl > 24*time.Hour {
			t.Errorf("key %q: ttl %v", k, ttl)
		}
	}
}

// TestReview139NewReplicaProbesAnOpenFleet: the fleet is open on a dead
// dependency (opened by another replica, its open timeout far off). A
// replica started now (a pod rescheduled, autoscaled, or crash-looping
// during the outage) must not send its calls to the dependency the fleet
// holds open: "the fleet opens together", and no more than
// HalfOpenRequests probes fleet-wide. Its first flush waits a whole
// flush interval, and until its answer the replica goes by a closed
// fleet.
func TestReview139NewReplicaProbesAnOpenFleet(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	s := breakerstore.New(srv.Client(), "r139n:")
	ctx := context.Background()
	const name = "newcomer"
	p := r139Policy()
	p.OpenTimeout = 10 * time.Second
	f, err := s.Sync(ctx, name, breaker.Sync{Batch: "other-1", Requests: 10, Failures: 10, GenerationUnknown: true,
		CountsAge: time.Millisecond, Replica: "other", Policy: p})
	if err != nil || f.State != resilience.StateOpen {
		t.Fatalf("setup: %v %+v", err, f)
	}
	for run := range 3 {
		b := breaker.New(name, breaker.Shared(s), breaker.FlushInterval(100*time.Millisecond),
			breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10), breaker.OpenTimeout(10*time.Second))
		// 16 callers, each with a 150 ms timeout, against a dependency
		// that hangs (a dead one behind a black-holing network).
		var reached atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for time.Since(start) < 200*time.Millisecond {
					cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
					_ = b.Execute(cctx, func(ctx context.Context) error { reached.Add(1); <-ctx.Done(); return ctx.Err() })
					cancel()
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		_ = b.Close()
		t.Logf("run %d: %d calls reached the dependency the fleet holds open", run, reached.Load())
		if reached.Load() > 0 {
			t.Errorf("run %d: a replica started while the fleet was open sent %d calls to the dead dependency", run, reached.Load())
		}
	}
}
