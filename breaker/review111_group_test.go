package breaker_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// A Group of shared breakers, one per host, asked concurrently for more
// hosts than its limit, while the store is down for a while: exactly
// limit breakers are made (each once), every call of a healthy dependency
// goes through (the store's fault fails none), and every breaker's
// goroutines end with Close (TestMain's goleak).
func TestReview111GroupOfSharedBreakersUnderAStoreOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchingStore{memStore: newMemStore()}
		const limit = 40
		var made atomic.Int64
		var mu sync.Mutex
		var all []*breaker.Breaker
		g := breaker.NewGroup(limit, func(host string) *breaker.Breaker {
			made.Add(1)
			b := breaker.New(host, breaker.Shared(store), breaker.FailureRate(0.5, 5),
				breaker.Window(time.Second, 10), breaker.FlushInterval(50*time.Millisecond))
			mu.Lock()
			all = append(all, b)
			mu.Unlock()
			return b
		})
		var failed, fellBack atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 400 {
					if i == 100 && w == 0 {
						store.fail.Store(true)
					}
					if i == 300 && w == 0 {
						store.fail.Store(false)
					}
					b, ok := g.Get("host-" + strconv.Itoa((i*7+w)%100))
					if !ok {
						fellBack.Add(1)
						continue
					}
					if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
						failed.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		if g.Len() != limit || made.Load() != limit {
			t.Errorf("Group made %d breakers, holds %d, limit %d", made.Load(), g.Len(), limit)
		}
		if failed.Load() != 0 {
			t.Errorf("%d calls of a healthy dependency failed", failed.Load())
		}
		for _, b := range all {
			_ = b.Close()
		}
		synctest.Wait()
	})
}
