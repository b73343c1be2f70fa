package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r145ForceStore is a well-behaved store (honours ctx) whose Force and
// Forced can be made to hang until their ctx ends, or to fail.
type r145ForceStore struct {
	mu         sync.Mutex
	forceHang  bool
	forceFail  bool
	forcedHang bool
	version    uint64
	mode       breaker.Forcing
}

func (s *r145ForceStore) Sync(ctx context.Context, name string, _ breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: s.version}, nil
}

func (s *r145ForceStore) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	s.mu.Lock()
	hang, fail := s.forceHang, s.forceFail
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("force failed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = max(s.version, after) + 1
	s.mode = f
	return nil
}

func (s *r145ForceStore) Restore(ctx context.Context, name string, f breaker.Forcing, v uint64) error {
	return nil
}

func (s *r145ForceStore) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	s.mu.Lock()
	hang := s.forcedHang
	f, v := s.mode, s.version
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return breaker.Forcing{}, 0, ctx.Err()
	}
	return f, v, nil
}

// SetMode promises to be bounded by its ctx and by 2 s. A second SetMode
// while a first one's write hangs (the store honouring ctx) must still
// return by its own ctx.
func TestReview145SetModeBoundedByItsCtxWhileAnotherSetModeHangs(t *testing.T) {
	// Real time: the wait is on a sync.Mutex, which synctest does not take
	// for durably blocked (a bubble hangs on it).
	{
		s := &r145ForceStore{forceHang: true}
		b := breaker.New("dep", breaker.Shared(s), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10))
		defer b.Close()
		time.Sleep(time.Millisecond)
		go func() { _ = b.SetMode(context.Background(), breaker.ForcedOpen, "first") }()
		time.Sleep(10 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_ = b.SetMode(ctx, breaker.Normal, "second")
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("SetMode with a 50 ms ctx took %v: not bounded by its ctx", d)
		}
		time.Sleep(2 * time.Second) // the first one's write ends
	}
}

// The same, with the flusher's resend of a mode the store did not take:
// its Forced hangs until the flush's deadline (a flush interval, here
// 1 s), holding the resend lock; a SetMode meanwhile must still be bounded
// by its ctx.
func TestReview145SetModeBoundedWhileTheFlusherResends(t *testing.T) {
	{
		s := &r145ForceStore{forceFail: true}
		b := breaker.New("dep", breaker.Shared(s), breaker.FailureRate(0.5, 10), breaker.Window(time.Minute, 6),
			breaker.FlushInterval(time.Second))
		defer b.Close()
		time.Sleep(time.Millisecond)
		if err := b.SetMode(context.Background(), breaker.ForcedOpen, "first"); err == nil {
			t.Fatal("the first SetMode should have failed")
		}
		s.mu.Lock()
		s.forceFail = false
		s.forcedHang = true // the store freezes after the next Sync answers
		s.mu.Unlock()
		time.Sleep(time.Second + 200*time.Millisecond) // the next flush: Sync answers, its resend hangs up to its deadline
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_ = b.SetMode(ctx, breaker.Normal, "second")
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("SetMode with a 50 ms ctx took %v: not bounded by its ctx", d)
		}
	}
}
