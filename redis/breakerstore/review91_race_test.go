package breakerstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// TestReview91ManyGoroutinesUnderFaults: 3 replicas x 40 goroutines on a
// real server that is frozen, thawed, killed, restarted and flushed in
// turn, calls failing at random and some panicking or calling Goexit;
// then every breaker closes within its bound and no goroutine is left.
func TestReview91ManyGoroutinesUnderFaults(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := redistest.Start(t)
	var clients []*redis.Client
	var bs []*breaker.Breaker
	const flush = 20 * time.Millisecond
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		clients = append(clients, c)
		st := breakerstore.New(c, "race91:")
		bs = append(bs, breaker.New("race", breaker.Shared(st), breaker.FailureRate(0.3, 5),
			breaker.HalfOpenRequests(2), breaker.OpenTimeout(30*time.Millisecond), breaker.FlushInterval(flush),
			breaker.Window(time.Second, 5)))
	}
	var stop atomic.Bool
	var failing atomic.Bool
	var wg sync.WaitGroup
	var calls, rejected atomic.Int64
	for _, b := range bs {
		for range 40 {
			wg.Go(func() {
				for !stop.Load() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(60))*time.Millisecond)
					func() {
						defer func() { _ = recover() }()
						done := make(chan struct{})
						go func() {
							defer close(done)
							defer func() { _ = recover() }()
							err := b.Execute(ctx, func(ctx context.Context) error {
								switch n := rand.IntN(200); {
								case n == 0:
									panic("op panics")
								case n == 1:
									// Goexit in op: ends this goroutine only
									runtimeGoexit()
								case failing.Load() && n < 150:
									return errors.New("dep")
								}
								return nil
							})
							if breaker.IsRejection(err) {
								rejected.Add(1)
							}
						}()
						<-done
					}()
					cancel()
					calls.Add(1)
				}
			})
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	steps := []func(){
		func() { failing.Store(true) },
		func() { srv.Freeze() },
		func() { srv.Thaw() },
		func() { failing.Store(false) },
		func() { _ = admin.FlushAll(context.Background()).Err() },
		func() { failing.Store(true) },
		func() { srv.Kill() },
		func() { srv.Restart() },
		func() { failing.Store(false) },
	}
	for _, s := range steps {
		s()
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	for i, b := range bs {
		st := time.Now()
		err := b.Close()
		if d := time.Since(st); d > 2*flush+50*time.Millisecond {
			t.Errorf("replica %d: Close took %v", i, d)
		}
		t.Logf("replica %d: fleet %v, Close err %v", i, b.FleetState(), err)
	}
	_ = admin.Close()
	for _, c := range clients {
		_ = c.Close()
	}
	t.Logf("%d calls, %d rejected", calls.Load(), rejected.Load())
}

func runtimeGoexit() { runtime.Goexit() }
