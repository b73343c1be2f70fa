package idempotency_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// review149Flaky fails every call while down, which flips on a schedule;
// when hang is set, a failing call hangs until its context ends instead.
type review149Flaky struct {
	*idempotency.MemoryStore
	down atomic.Bool
	hang bool
}

func (s *review149Flaky) fail(ctx context.Context) error {
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errReview149Down
}

func (s *review149Flaky) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.down.Load() {
		return nil, s.fail(ctx)
	}
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

func (s *review149Flaky) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.down.Load() {
		return s.fail(ctx)
	}
	return s.MemoryStore.Renew(ctx, key, claim, lease)
}

func (s *review149Flaky) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		return s.fail(ctx)
	}
	return s.MemoryStore.Complete(ctx, key, claim, rec, ttl)
}

func (s *review149Flaky) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.down.Load() {
		return s.fail(ctx)
	}
	return s.MemoryStore.Release(ctx, key, claim)
}

// "A process claims a key once, reserving it before it asks": whatever the
// store does (up, down, flapping, the guard failing open and back, claims
// moved to local records as their leases run out), one replica never runs
// two requests of one key at the same time. Handlers up to twice the
// lease; 30 goroutines on 4 keys for 20 s of fake time.
func TestReview149OneReplicaNeverRunsAKeyTwiceAtOnce(t *testing.T) {
	for _, hang := range []bool{false, true} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("hang=%v/seed=%d", hang, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					store := &review149Flaky{MemoryStore: idempotency.NewMemoryStore(0), hang: hang}
					var mu sync.Mutex
					running := map[string]int{}
					var overlaps, runs atomic.Int32
					rng := rand.New(rand.NewPCG(seed, 149))
					var rmu sync.Mutex
					dur := func() time.Duration {
						rmu.Lock()
						defer rmu.Unlock()
						return time.Duration(rng.IntN(1200)) * time.Millisecond
					}
					h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet),
						idempotency.Lease(600*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond),
						idempotency.FailOpenAfter(300*time.Millisecond))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						k := r.Header.Get(idempotency.Header)
						mu.Lock()
						running[k]++
						if running[k] > 1 {
							overlaps.Add(1)
						}
						mu.Unlock()
						runs.Add(1)
						time.Sleep(dur())
						mu.Lock()
						running[k]--
						mu.Unlock()
						if d := dur(); d < 400*time.Millisecond {
							w.WriteHeader(http.StatusServiceUnavailable) // nothing committed: the key is freed, a retry runs
							return
						}
						w.WriteHeader(http.StatusCreated)
					}))
					stop := time.Now().Add(20 * time.Second)
					go func() { // the store flaps
						for time.Now().Before(stop) {
							time.Sleep(dur() + 100*time.Millisecond)
							store.down.Store(!store.down.Load())
						}
						store.down.Store(false)
					}()
					var wg sync.WaitGroup
					for g := range 30 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := 0; time.Now().Before(stop); i++ {
								review149Do(h, fmt.Sprintf("k%d-%d", (g+i)%4, time.Now().UnixMilli()/1500))
								time.Sleep(dur() / 4)
							}
						}()
					}
					wg.Wait()
					time.Sleep(5 * time.Second)
					t.Logf("runs %d, overlapping runs %d", runs.Load(), overlaps.Load())
					if overlaps.Load() != 0 {
						t.Errorf("one replica ran a key twice at once %d times", overlaps.Load())
					}
				})
			})
		}
	}
}
