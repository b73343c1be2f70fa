package idempotency

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

type r49CompleteFails struct{ *r49Store }

func (s r49CompleteFails) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	return errR49
}

// Saves refused forever while renewals get through; and a store hanging
// forever: CompleteLater's goroutine must end within about a lease.
func TestReview49_CompleteLaterNoLeak(t *testing.T) {
	for _, mode := range []string{"refuse", "hang", "hangOpen"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &r49Store{mem: NewMemoryStore(0)}
				var st Store = s
				fo := FailOpenAfter(-1)
				if mode == "refuse" {
					st = r49CompleteFails{s}
				}
				if mode == "hangOpen" {
					fo = FailOpenAfter(time.Second)
				}
				g := NewGuard(st, Lease(3*time.Second), StoreTimeout(time.Second), fo)
				c, _, _ := g.Begin(context.Background(), "s", "k", "fp")
				if mode != "refuse" {
					s.hang.Store(true)
				}
				start := time.Now()
				c.CompleteLater(context.Background(), Record{Status: 200})
				if d := time.Since(start); d > 1100*time.Millisecond {
					t.Errorf("held %v", d)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					if _, ok := g.inflight.Load(c.Key); !ok {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: save still going on %v after CompleteLater (lease 3s)", mode, time.Since(start))
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Logf("%s: save ended after %v", mode, time.Since(start))
				s.hang.Store(false)
			})
		})
	}
}
