package idempotencystore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// (a) on a real redis-server: OOM (noeviction), a freeze, READONLY (a
// replica of a master that is gone), then recovery. A key the store holds
// is never run again; a key run locally meanwhile is replayed after.
func TestReview151RedisRefusesWritesFlips(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	store := idempotencystore.New(c, fmt.Sprintf("r151:%d:", time.Now().UnixNano()))
	g := idempotency.NewGuard(store, idempotency.FailOpenAfter(time.Second), idempotency.StoreTimeout(300*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx := context.Background()
	runs := map[string]int{}
	run := func(k string) (*idempotency.Record, error) {
		cl, rec, err := g.Begin(ctx, "s", k, "fp-"+k)
		if err != nil || rec != nil {
			return rec, err
		}
		runs[k]++
		return nil, cl.Complete(ctx, idempotency.Record{Status: 201, Body: []byte(k)})
	}
	if _, err := run("stored"); err != nil {
		t.Fatal(err)
	}
	cfg := func(args ...any) {
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	traffic := func(prefix string, d time.Duration, check bool) {
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			start := time.Now()
			_, _ = run(fmt.Sprint(prefix, i))
			if took := time.Since(start); took > 700*time.Millisecond {
				t.Errorf("%s request %d took %v", prefix, i, took)
			}
			if !check {
			} else if rec, err := run("stored"); rec == nil && err == nil {
				t.Errorf("%s: the stored key ran again", prefix)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	cfg("CONFIG", "SET", "maxmemory", "1")
	_, err := store.Begin(ctx, "direct-new", idempotency.Record{Fingerprint: "x", Token: "t"}, time.Second)
	if !errors.Is(err, idempotency.ErrWritesRefused) {
		t.Errorf("OOM Begin of a new key: %v, want ErrWritesRefused", err)
	}
	traffic("oom-", 2500*time.Millisecond, true)
	if rec, err := run("oom-local"); err != nil || rec != nil {
		t.Errorf("failed open on OOM, a new key did not run: %v", err)
	}

	srv.Freeze()
	traffic("frozen-", 1200*time.Millisecond, false)
	srv.Thaw()
	traffic("thawed-", 1500*time.Millisecond, false)
	traffic("thawed2-", 2*time.Second, true)

	cfg("CONFIG", "SET", "maxmemory", "0")
	cfg("REPLICAOF", "127.0.0.1", "1")
	_, err = store.Begin(ctx, "direct-new2", idempotency.Record{Fingerprint: "x", Token: "t"}, time.Second)
	if !errors.Is(err, idempotency.ErrWritesRefused) {
		t.Errorf("READONLY Begin of a new key: %v, want ErrWritesRefused", err)
	}
	traffic("ro-", 2*time.Second, true)
	cfg("REPLICAOF", "NO", "ONE")
	traffic("back-", 4*time.Second, true)
	if rec, err := run("oom-local"); rec == nil {
		t.Errorf("a key run locally during OOM was not replayed after recovery: %v", err)
	}
	for k, n := range runs {
		if n > 1 {
			t.Errorf("key %q ran %d times", k, n)
		}
	}
}
