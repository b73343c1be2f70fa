package breakerstore_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// freezingStore freezes the server right after a Sync returns, so that the
// forced-mode read and write of the same flush meet a frozen server.
type freezingStore struct {
	*breakerstore.Store
	freezeAfterSync chan struct{}
	srv             *redistest.Server
}

func (s *freezingStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	f, err := s.Store.Sync(ctx, name, sy)
	select {
	case <-s.freezeAfterSync:
		s.srv.Freeze()
	default:
	}
	return f, err
}

// Close stays within two flush intervals with Redis frozen at each step of
// a flush: before the Sync, during it, and after it (the forced-mode read
// and the resend of a mode SetMode could not write).
func TestReview112CloseWithinTwoIntervalsFrozenAtEachStep(t *testing.T) {
	const every = 200 * time.Millisecond
	const slack = 80 * time.Millisecond
	for i, step := range []string{"beforeSync", "afterSyncForced", "afterSyncResend", "longFrozen", "beforeSync2", "afterSyncForced2"} {
		t.Run(step, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			st := &freezingStore{Store: breakerstore.New(c, "r112:"), freezeAfterSync: make(chan struct{}), srv: srv}
			b := breaker.New("close"+step, breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
				breaker.Shared(st), breaker.FlushInterval(every))
			ctx := context.Background()
			for range 20 {
				_ = b.Execute(ctx, func(context.Context) error { return nil })
			}
			time.Sleep(2*every + time.Duration(i)*17*time.Millisecond)
			switch step {
			case "beforeSync", "beforeSync2":
				srv.Freeze()
			case "afterSyncForced", "afterSyncForced2":
				// Another replica sets a mode: this one reads it after its Sync.
				other := breaker.New("close"+step, breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
					breaker.Shared(breakerstore.New(srv.Client(), "r112:")), breaker.FlushInterval(every))
				if err := other.SetMode(ctx, breaker.ForcedClosed, "op"); err != nil {
					t.Fatal(err)
				}
				_ = other.Close()
				close(st.freezeAfterSync)
			case "afterSyncResend":
				srv.Freeze()
				sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := b.SetMode(sctx, breaker.ForcedClosed, "op") // fails: resent after the next flush
				cancel()
				if err == nil {
					t.Fatal("SetMode reached a frozen server")
				}
				srv.Thaw()
				close(st.freezeAfterSync)
			case "longFrozen":
				srv.Freeze()
				time.Sleep(3 * every) // flushes time out, connections dropped
			}
			// Close at some moment of a flush.
			time.Sleep(time.Duration(i*31%190) * time.Millisecond)
			for range 20 {
				_ = b.Execute(ctx, func(context.Context) error { return errors.New("x") })
			}
			start := time.Now()
			_ = b.Close()
			took := time.Since(start)
			srv.Thaw()
			t.Logf("%s: Close took %v", step, took)
			if took > 2*every+slack {
				t.Errorf("%s: Close took %v, over two flush intervals (%v)", step, took, 2*every)
			}
		})
	}
	runtime.GC()
}

// No goroutine of the breaker or its watcher outlives Close by more than a
// moment, Redis frozen when Close is called.
func TestReview112NoGoroutineAfterCloseFrozen(t *testing.T) {
	const every = 200 * time.Millisecond
	srv := redistest.Start(t)
	c := srv.Client()
	base := runtime.NumGoroutine()
	b := breaker.New("leak", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.Shared(breakerstore.New(c, "r112:")), breaker.FlushInterval(every))
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	time.Sleep(3 * every)
	srv.Freeze()
	time.Sleep(every / 3)
	_ = b.Close()
	deadline := time.Now().Add(2 * every)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		srv.Thaw()
		t.Fatalf("%d goroutines %v after Close (before: %d):\n%s", n, 2*every, base, buf)
	}
	srv.Thaw()
}
