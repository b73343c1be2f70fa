package idempotency

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Begin's doc: a replay's Header and Body may be shared, to be read, not
// modified; the rest of the returned Record is the caller's. The caller
// of the Begin that asked the store changes its Record's Status (its
// own): the Begins that waited on it must not replay the change, nor
// race with it.
func TestReview41_ClaimantCallerMutatesItsRecord(t *testing.T) {
	s := newR41Store()
	g := NewGuard(s, StoreTimeout(time.Second), Lease(3*time.Second), FailOpenAfter(-1), WithLogger(r41Quiet))
	ctx := context.Background()
	c, _, _ := g.Begin(ctx, "sc", "k", "fp")
	if err := c.Complete(ctx, Record{Status: 201, Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	var corrupted, rounds atomic.Int64
	for range 200 {
		rounds.Add(1)
		gate := make(chan struct{})
		var first atomic.Bool
		s.beginHook = func(ctx context.Context, n int64, _ string, _ Record) error {
			if first.CompareAndSwap(false, true) {
				<-gate
			}
			return nil
		}
		var wg sync.WaitGroup
		var asked sync.WaitGroup
		asked.Add(1)
		wg.Add(1)
		go func() { // the one that asks the store
			defer wg.Done()
			_, rec, _ := g.Begin(ctx, "sc", "k", "fp")
			if rec != nil {
				rec.Status = 999 // its own copy, per the doc
			}
		}()
		for s.begins.Load() == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, rec, _ := g.Begin(ctx, "sc", "k", "fp")
				if rec != nil && rec.Status != 201 {
					corrupted.Add(1)
				}
			}()
		}
		time.Sleep(time.Millisecond)
		close(gate)
		wg.Wait()
		s.begins.Store(0)
	}
	if corrupted.Load() > 0 {
		t.Errorf("%d replays (of %d rounds x 8) got the status another caller set on its own Record", corrupted.Load(), rounds.Load())
	}
}
