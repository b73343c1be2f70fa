package breakerstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// review111FreezeAfterSync is the Redis store, whose server freezes
// (SIGSTOP) as soon as a flush armed when it started has its answer: a
// server that stalls between two commands of one flush.
type review111FreezeAfterSync struct {
	*breakerstore.Store
	srv     *redistest.Server
	armed   atomic.Bool
	started chan struct{} // an armed flush started
	frozen  chan struct{} // and froze the server after its answer
}

func (s *review111FreezeAfterSync) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	armed := s.armed.Load()
	if armed {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	got, err := s.Store.Sync(ctx, name, sy)
	if armed && err == nil && s.armed.CompareAndSwap(true, false) {
		s.srv.Freeze()
		close(s.frozen)
	}
	return got, err
}

// Close is documented to take "at most two flush intervals: one for a
// flush under way, one for the last, whatever Redis does". A flush is
// bounded by its interval, but after its answer the flusher writes again
// a mode SetMode could not write (resendForcing) and reads the fleet's new
// mode (takeForcing), each under a timeout of its own of one more
// interval, not clamped to Close's bound: a server that stalls right after
// the flush's answer makes the flush under way last up to three
// intervals.
func TestReview111CloseOutlastsTwoFlushIntervals(t *testing.T) {
	const every = 200 * time.Millisecond
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	raw := srv.Client()
	store := &review111FreezeAfterSync{Store: breakerstore.New(client, "r111close:"), srv: srv,
		started: make(chan struct{}, 1), frozen: make(chan struct{})}
	b := breaker.New("dep", breaker.Shared(store), breaker.FailureRate(0.5, 10), breaker.FlushInterval(every))
	closed := false
	t.Cleanup(func() {
		srv.Thaw()
		if !closed {
			_ = b.Close()
		}
	})
	time.Sleep(3 * every) // shared

	// A mode set while the link is cut: the flusher is to write it again.
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := b.SetMode(ctx, breaker.ForcedClosed, "alice")
	cancel()
	if err == nil {
		t.Fatal("SetMode got through a cut link")
	}
	// Another replica sets a mode meanwhile: a newer version to take.
	bg := context.Background()
	v := strconv.FormatInt(time.Now().UnixMilli()+60_000, 10)
	if err := raw.Set(bg, "r111close:{dep}:force", "2 "+strconv.FormatInt(time.Now().UnixMilli(), 10)+" bob", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Set(bg, "r111close:{dep}:forcev", v, 0).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Delay(25 * time.Millisecond) // a slow link: a flush takes most of its interval
	store.armed.Store(true)
	proxy.Heal()

	select {
	case <-store.started:
	case <-time.After(5 * every):
		t.Fatal("no flush started")
	}
	start := time.Now()
	_ = b.Close()
	took := time.Since(start)
	closed = true
	select {
	case <-store.frozen:
	default:
		t.Skip("the armed flush failed: the server was not frozen; run again")
	}
	t.Logf("Close took %v (bound 2 intervals = %v)", took, 2*every)
	if slack := 50 * time.Millisecond; took > 2*every+slack {
		t.Errorf("Close took %v, more than two flush intervals (%v) + %v", took, 2*every, slack)
	}
}
