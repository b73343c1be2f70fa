package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var policy147 = breaker.FleetPolicy{
	Rate: 0.5, MinRequests: 5, Window: 10 * time.Second, Buckets: 10,
	OpenTimeout: 200 * time.Millisecond, HalfOpenRequests: 3,
	ProbeTimeout: 300 * time.Millisecond, FlushInterval: 100 * time.Millisecond,
}

// open147 opens the fleet of name and waits until it is half-open; it
// returns the half-open generation.
func open147(t *testing.T, s *breakerstore.Store, name string) uint64 {
	t.Helper()
	ctx := context.Background()
	hello, err := s.Sync(ctx, name, breaker.Sync{Replica: "X", GenerationUnknown: true, Policy: policy147})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Sync(ctx, name, breaker.Sync{Replica: "X", Batch: "X-1", Requests: 10, Failures: 10,
		Generation: hello.Generation, Policy: policy147})
	if err != nil || got.State != resilience.StateOpen {
		t.Fatalf("not opened: %+v %v", got, err)
	}
	time.Sleep(policy147.OpenTimeout + 30*time.Millisecond)
	return got.Generation
}

// TestReview147OwnProbesOverrideGrantedFailure: the store grants at most
// HalfOpenRequests probes "with the probes that succeeded", so that the
// fleet closes only when HalfOpenRequests probes in a row succeeded. A
// vouching replica's own probes (reported with no grant) are not counted
// against the grants: with one granted probe out, a vouching replica's
// three successes close the fleet, and the granted probe's failure,
// reported next, is dropped.
func TestReview147OwnProbesOverrideGrantedFailure(t *testing.T) {
	t.Skip("known limit (docs/shared-breaker.md, vouching): a vouching replica's own probes are not counted against the grants, and an outcome of the half-open generation reported after it closed is dropped, as gobreaker drops a result of a past generation")
	srv := redistest.Start(t, "--appendonly", "no")
	s := breakerstore.New(srv.Client(), "r147:")
	ctx := context.Background()
	gen := open147(t, s, "override")

	// B, whose own breaker is closed, asks for a probe and is granted one.
	b, err := s.Sync(ctx, "override", breaker.Sync{Replica: "B", Generation: gen, State: resilience.StateOpen,
		OpenedFor: 250 * time.Millisecond, WantProbe: true, Policy: policy147})
	if err != nil || b.State != resilience.StateHalfOpen || !b.ProbeGranted {
		t.Fatalf("B not granted: %+v %v", b, err)
	}
	// A vouches (tells closed) and reports its first three calls' outcomes.
	a, err := s.Sync(ctx, "override", breaker.Sync{Replica: "A", Batch: "A-1", Requests: 3, Generation: gen,
		State: resilience.StateClosed, ProbeSuccesses: 3, Policy: policy147})
	if err != nil {
		t.Fatal(err)
	}
	// B's granted probe failed.
	b2, err := s.Sync(ctx, "override", breaker.Sync{Replica: "B", Batch: "B-1", Requests: 1, Failures: 1, Generation: gen,
		State: resilience.StateHalfOpen, OpenedFor: 300 * time.Millisecond, ProbeFailures: 1, Policy: policy147})
	if err != nil {
		t.Fatal(err)
	}
	if a.State == resilience.StateClosed && b2.State == resilience.StateClosed {
		t.Errorf("4 probes ran in the half-open generation (3 own, 1 granted), one failed, and the fleet closed: A's answer %+v, B's failure answered %+v", a, b2)
	}
}

// TestReview147CountsAfterClose: the counts of a batch whose probe success
// closes the fleet stay out of the new window; the counts of the new closed
// generation, from a replica that heard the close at once (Watch), and from
// the closing replica's next batch, are counted.
func TestReview147CountsAfterClose(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	s := breakerstore.New(srv.Client(), "r147:")
	ctx := context.Background()
	gen := open147(t, s, "counts")

	g, err := s.Sync(ctx, "counts", breaker.Sync{Replica: "A", WantProbe: true, Generation: gen,
		State: resilience.StateOpen, OpenedFor: 250 * time.Millisecond, Policy: policy147})
	if err != nil || !g.ProbeGranted {
		t.Fatalf("A not granted: %+v %v", g, err)
	}
	// A's probe succeeds, with 40 calls of the half-open generation (a
	// vouching replica's, say); HalfOpenRequests 3, so first two more.
	for i, r := range []string{"P", "Q"} {
		if _, err := s.Sync(ctx, "counts", breaker.Sync{Replica: r, WantProbe: true, Generation: gen,
			State: resilience.StateOpen, OpenedFor: 250 * time.Millisecond, Policy: policy147}); err != nil {
			t.Fatal(i, err)
		}
		if _, err := s.Sync(ctx, "counts", breaker.Sync{Replica: r, Batch: r + "-1", Requests: 1, Generation: gen,
			State: resilience.StateHalfOpen, ProbeSuccesses: 1, Policy: policy147}); err != nil {
			t.Fatal(err)
		}
	}
	closed, err := s.Sync(ctx, "counts", breaker.Sync{Replica: "A", Batch: "A-1", Requests: 40, Failures: 20, Generation: gen,
		State: resilience.StateHalfOpen, ProbeSuccesses: 1, Policy: policy147})
	if err != nil || closed.State != resilience.StateClosed {
		t.Fatalf("not closed: %+v %v", closed, err)
	}
	// A replica that heard the close by Watch sends counts of the new one.
	if _, err := s.Sync(ctx, "counts", breaker.Sync{Replica: "Y", Batch: "Y-1", Requests: 7, Failures: 1,
		Generation: closed.Generation, Policy: policy147}); err != nil {
		t.Fatal(err)
	}
	// A's next batch, in the new generation.
	if _, err := s.Sync(ctx, "counts", breaker.Sync{Replica: "A", Batch: "A-2", Requests: 2,
		Generation: closed.Generation, Policy: policy147}); err != nil {
		t.Fatal(err)
	}
	// A's closing batch again (its answer lost): applied once, nothing more.
	if _, err := s.Sync(ctx, "counts", breaker.Sync{Replica: "A", Batch: "A-1", Requests: 40, Failures: 20, Generation: gen,
		State: resilience.StateHalfOpen, ProbeSuccesses: 1, Policy: policy147}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Read(ctx, "counts", policy147)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != resilience.StateClosed || st.Generation != closed.Generation || st.Requests != 9 || st.Failures != 1 {
		t.Errorf("window after the close: %+v, want closed gen %d with 9 requests, 1 failure", st, closed.Generation)
	}
}

// TestReview147ResentProbeNotTwice: a batch of probe successes whose answer
// was lost, sent again, counts once: with HalfOpenRequests 3, two
// successes of one batch sent twice do not close the fleet.
func TestReview147ResentProbeNotTwice(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	s := breakerstore.New(srv.Client(), "r147:")
	ctx := context.Background()
	gen := open147(t, s, "twice")
	sy := breaker.Sync{Replica: "A", Batch: "A-5", Requests: 2, Generation: gen,
		State: resilience.StateClosed, ProbeSuccesses: 2, Policy: policy147}
	for range 2 {
		got, err := s.Sync(ctx, "twice", sy)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == resilience.StateClosed {
			t.Fatalf("closed on 2 successes sent twice (HalfOpenRequests 3): %+v", got)
		}
	}
	// A lower batch number of the same replica (never sent before) is taken
	// as already applied: fine, batches grow by one.
}
