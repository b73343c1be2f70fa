package idempotencystore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func r151Guard(t *testing.T, opts ...idempotency.Option) (*redistest.Server, *idempotency.Guard, func(k string) (ran bool, rec *idempotency.Record, err error)) {
	srv := redistest.Start(t)
	store := idempotencystore.New(srv.Client(), fmt.Sprintf("r151b:%d:", time.Now().UnixNano()))
	opts = append([]idempotency.Option{idempotency.StoreTimeout(300 * time.Millisecond),
		idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	g := idempotency.NewGuard(store, opts...)
	run := func(k string) (bool, *idempotency.Record, error) {
		cl, rec, err := g.Begin(context.Background(), "s", k, "fp-"+k)
		if err != nil || rec != nil {
			return false, rec, err
		}
		return true, nil, cl.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte(k)})
	}
	return srv, g, run
}

// Real faults: two single timeouts (a 350 ms freeze each) about
// FailOpenAfter (10 s) apart on a guard that sees nothing else; the probe
// a second after the first finds the server answering. The second must
// not fail the guard open and run a stored key again.
func TestReview151RedisTwoFreezesTenSecondsApart(t *testing.T) {
	srv, _, run := r151Guard(t)
	if ran, _, err := run("stored"); !ran || err != nil {
		t.Fatalf("first run: %v", err)
	}
	time.Sleep(11 * time.Second) // quiet
	// The guard's seconds (of its own monotonic clock, internal to the
	// core module) cannot be aligned with from here: the synctest
	// TestReview151TwoBlipsFailOpenAfterApartDoNotFailOpen in package
	// idempotency places the failures exactly; this is the same on a real
	// server, at whatever phase.
	srv.Freeze()
	f1 := time.Now()
	ran, _, err := run("blip")
	srv.Thaw()
	if ran || err == nil {
		t.Fatalf("blip 1: ran %v err %v", ran, err)
	}
	time.Sleep(time.Until(f1.Add(10*time.Second + 150*time.Millisecond)))
	srv.Freeze()
	ran, rec, err := run("stored")
	srv.Thaw()
	if ran {
		t.Errorf("two 350 ms freezes 10.15 s apart on a quiet guard (the probe between answered): the stored key ran again")
	} else {
		t.Logf("held: rec %v err %v", rec != nil, err)
	}
}

// Real faults: a guard failed open on a Redis out of memory (it reads,
// refuses writes) replays a stored key; one timeout (a 350 ms freeze)
// among the refusals, and the next repeat of the stored key runs again.
func TestReview151RedisOOMOneFreezeRunsStoredKeyAgain(t *testing.T) {
	srv, _, run := r151Guard(t, idempotency.FailOpenAfter(time.Second))
	c := srv.Client()
	const n = 3
	for i := range n {
		if ran, _, err := run(fmt.Sprint("stored-", i)); !ran || err != nil {
			t.Fatalf("first run: %v", err)
		}
	}
	if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		run(fmt.Sprint("warm-", i))
		time.Sleep(100 * time.Millisecond)
	}
	reran := 0
	for i := range n {
		stored := fmt.Sprint("stored-", i)
		if ran, rec, err := run(stored); ran || rec == nil {
			t.Fatalf("before the freeze, failed open on OOM: stored key ran %v err %v", ran, err)
		}
		time.Sleep(1100 * time.Millisecond)
		run(fmt.Sprint("tick-", i)) // its turn: the probe finds the server refusing writes
		srv.Freeze()
		run(fmt.Sprint("slow-", i))
		srv.Thaw()
		if ran, _, _ := run(stored); ran {
			reran++
		}
		time.Sleep(1100 * time.Millisecond)
		run(fmt.Sprint("tock-", i)) // the probe learns it refuses again
	}
	if reran > 0 {
		t.Errorf("%d of %d: after one timeout among OOM refusals, a stored key ran again on the guard's records", reran, n)
	}
}

// Real faults: failed open on a Redis out of memory, each request's
// refused claim (nothing written) is noted as an orphan, and the reaper
// then runs the release script for it again and again until its lease
// could have run out: a store in trouble gets several calls a request.
func TestReview151RedisOOMRefusedClaimsReaped(t *testing.T) {
	srv, _, run := r151Guard(t, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	c := srv.Client()
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		run(fmt.Sprint("warm-", i))
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(4 * time.Second) // the warm-up's orphans end
	scripts := func() int64 {
		var n int64
		for _, cmd := range []string{"evalsha", "eval"} {
			v, err := c.Do(ctx, "INFO", "commandstats").Text()
			if err != nil {
				t.Fatal(err)
			}
			var calls int64
			for _, line := range splitLines(v) {
				if _, err := fmt.Sscanf(line, "cmdstat_"+cmd+":calls=%d", &calls); err == nil {
					n += calls
				}
			}
		}
		return n
	}
	before := scripts()
	const n = 100
	for i := range n {
		if ran, _, err := run(fmt.Sprint("k-", i)); !ran {
			t.Fatalf("request %d did not run failed open: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(4 * time.Second)
	d := scripts() - before
	t.Logf("%d requests failed open on an OOM Redis: %d script calls after", n, d)
	if d > n {
		t.Errorf("%d script calls (%.1f a request) for %d requests whose claims the server refused to write", d, float64(d)/n, n)
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, string([]byte(s[start:i])))
			start = i + 1
		}
	}
	return out
}

// Real faults: docs/idempotency.md, store full: "full for longer,
// EventNotStored, 409 until the lease runs out, then 503 while the server
// is full". A request claimed before the server filled, on a guard that
// has failed open on the refusals meanwhile: after the lease, its repeat
// to the same process, the server still full, must not run again.
func TestReview151RedisFullSaveRefusedRepeatRunsAgain(t *testing.T) {
	srv, g, run := r151Guard(t, idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))
	c := srv.Client()
	ctx := context.Background()
	cl, _, err := g.Begin(ctx, "s", "k", "fp-k")
	if err != nil || cl == nil {
		t.Fatalf("begin: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		run(fmt.Sprint("warm-", i))
		time.Sleep(100 * time.Millisecond)
	}
	cerr := cl.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("k")})
	t.Logf("complete: %v", cerr)
	time.Sleep(4 * time.Second)
	ran, rec, err := run("k")
	if ran {
		t.Errorf("the server still full, a repeat of a request whose save it refused ran again on the same process (doc: 503 while full)")
	} else {
		t.Logf("held: rec %v err %v", rec != nil, err)
	}
}
