package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review24OpenStore is a fleet store that always answers "open" (the
// fleet's probes keep failing against a dead dependency), in 5 ms, except
// for the flushes listed in hang, which hang until their deadline (one
// slow Redis answer: a fork for a snapshot, a GC pause, a failover), and
// those listed in slow, answered in 40 ms (well within the flush's
// 100 ms bound).
type review24OpenStore struct {
	n          atomic.Int32
	hang, slow map[int32]bool
}

func (s *review24OpenStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	n := s.n.Add(1)
	d := 5 * time.Millisecond
	if s.hang[n] {
		d = time.Hour
	} else if s.slow[n] {
		d = 40 * time.Millisecond
	}
	select {
	case <-time.After(d):
		return breaker.Fleet{State: resilience.StateOpen, Generation: 7}, nil
	case <-ctx.Done():
		return breaker.Fleet{}, ctx.Err()
	}
}

// A shared breaker whose store has said "open" at every answer must not
// send calls to the dead dependency because ONE flush out of many timed
// out, the next answering in 40 ms. With the new default OpenTimeout (100 ms) the staleness bound is
// max(OpenTimeout, 2 x FlushInterval) = 200 ms: the answer of the flush
// after a single lost one comes 200 ms + its latency after the last
// confirmation, so the replica falls back to local decisions for that
// latency and lets every call through (with the former 30 s default the
// bound was 30 s and this test passes: see the second subtest).
func TestOneLostFlushKeepsAnOpenFleetOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []breaker.Option
	}{
		{"default OpenTimeout", nil},
		{"OpenTimeout 30s (former default)", []breaker.Option{breaker.OpenTimeout(30 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &review24OpenStore{hang: map[int32]bool{5: true}, slow: map[int32]bool{6: true}}
				var unconfirmed atomic.Int32
				l := resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventSharedStateUnavailable && errors.Is(e.Err, breaker.ErrFleetUnconfirmed) {
						unconfirmed.Add(1)
					}
				})
				opts := append([]breaker.Option{breaker.Shared(store), breaker.FailureRate(0.5, 10),
					breaker.Window(10*time.Second, 10), breaker.WithListener(l)}, tc.opts...)
				b := breaker.New("dep", opts...)
				defer b.Close()
				time.Sleep(150 * time.Millisecond) // the first answer: the fleet is open
				if b.FleetState() != resilience.StateOpen {
					t.Fatalf("fleet state %v, want open", b.FleetState())
				}
				var hits atomic.Int32
				dead := errors.New("503")
				// 400 calls a second for 1 s; the store says open all along
				// but for one flush (the 5th, at 500 ms) that timed out.
				for range 400 {
					_ = b.Execute(context.Background(), func(context.Context) error {
						hits.Add(1)
						return dead
					})
					time.Sleep(2500 * time.Microsecond)
				}
				if h := hits.Load(); h > 0 {
					t.Errorf("%d calls reached the dead dependency while every answer of the store said the fleet was open (one flush of 10 timed out, the next answered in 40 ms); %d ErrFleetUnconfirmed events", h, unconfirmed.Load())
				}
			})
		})
	}
}
