package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redis/go-redis/v9"
	"github.com/resiliencekit/resiliencekit/breaker"

	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// TestReview91CloseWhileStoreHangs: Close within two flush intervals
// with the server frozen or the link cut (before and after the
// subscription is set up), and no goroutine left once the clients close.
func TestReview91CloseWhileStoreHangs(t *testing.T) {
	for _, fault := range []string{"freeze-early", "freeze-late", "cut-early", "cut-late"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t)
			px := redistest.NewProxy(t, srv.Addr())
			ign := goleak.IgnoreCurrent()
			c := redisClient91(px.Addr())
			const flush = 50 * time.Millisecond
			early := fault == "freeze-early" || fault == "cut-early"
			doFault := func() {
				if fault[:3] == "fre" {
					srv.Freeze()
				} else {
					px.Cut()
				}
			}
			if early {
				doFault()
			}
			b := breaker.New("close91", breaker.Shared(breakerstore.New(c, "close91:")), breaker.FailureRate(0.5, 2), breaker.FlushInterval(flush))
			for range 50 {
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
				time.Sleep(2 * time.Millisecond)
			}
			if !early {
				doFault()
				time.Sleep(30 * time.Millisecond)
			}
			s := time.Now()
			err := b.Close()
			d := time.Since(s)
			t.Logf("%s: Close %v, err %v", fault, d.Round(time.Millisecond), err)
			if d > 2*flush+30*time.Millisecond {
				t.Errorf("%s: Close took %v, bound %v", fault, d, 2*flush)
			}
			_ = c.Close()
			srv.Thaw()
			px.Heal()
			time.Sleep(100 * time.Millisecond)
			if err := goleak.Find(ign); err != nil {
				t.Errorf("%s: goroutines left after Close and the client's Close: %v", fault, err)
			}
		})
	}
}

func redisClient91(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}
