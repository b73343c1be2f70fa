package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// watchFirstStore is unreachable until up; its watcher delivers one change
// (the fleet just closed, generation 5) when told, before any flush gets an
// answer. It records every Sync it is sent.
type watchFirstStore struct {
	mu     sync.Mutex
	up     bool
	syncs  []breaker.Sync
	change chan breaker.Fleet
}

func (s *watchFirstStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return breaker.Fleet{}, errors.New("down")
	}
	s.syncs = append(s.syncs, sy)
	return breaker.Fleet{Generation: 5, ChangedFor: 5 * time.Millisecond}, nil
}

func (s *watchFirstStore) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	select {
	case f := <-s.change:
		changed(f)
		<-ctx.Done()
	case <-ctx.Done():
	}
	return ctx.Err()
}

// A replica cut off from its start gathers an outage's failures; the link
// comes back as the fleet closes: the watcher hears the change (the fleet
// closed in generation 5) a moment before the first flush's answer. The
// outage's failures began before that change: they must not be sent as
// generation 5's (they would reopen the recovered fleet).
func TestAChangeHeardFromTheWatcherLeavesOutageCountsUnknown(t *testing.T) {
	st := &watchFirstStore{change: make(chan breaker.Fleet, 1)}
	b := breaker.New("w", breaker.Shared(st), breaker.FlushInterval(20*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 1000), breaker.Window(10*time.Second, 10))
	defer b.Close()
	time.Sleep(50 * time.Millisecond) // the first flushes fail: a pending batch of nothing
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("outage") })
	}
	time.Sleep(30 * time.Millisecond)
	st.change <- breaker.Fleet{Generation: 5} // the fleet closed, as the link returns
	time.Sleep(5 * time.Millisecond)
	st.mu.Lock()
	st.up = true
	st.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, sy := range st.syncs {
		if !sy.GenerationUnknown && sy.Generation == 5 && sy.Failures > 0 {
			t.Fatalf("the outage's %d failures were sent as the new generation's: %+v", sy.Failures, sy)
		}
	}
}
