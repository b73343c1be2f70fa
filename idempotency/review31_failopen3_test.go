package idempotency_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r31Store is r29Store (a MemoryStore behind a switch) whose beginHook,
// if set, decides each Begin first.
type r31Store struct {
	*r29Store
	beginHook atomic.Pointer[func(ctx context.Context, key string) error] // nil: pass through
}

func newR31Store() *r31Store { return &r31Store{r29Store: newR29Store()} }

func (s *r31Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if h := s.beginHook.Load(); h != nil {
		if err := (*h)(ctx, key); err != nil {
			return nil, err
		}
	}
	return s.r29Store.Begin(ctx, key, claim, lease)
}

var r31Quiet = slog.New(slog.DiscardHandler)

// Two requests of one key reach one process together just as the guard
// fails open: the store fails the first's claim (which opens the guard, so
// it is claimed on the local records) and answers the second's (sent
// before the guard opened). Both run, concurrently, on one process.
func TestReview31_OpenTransitionSameKeyRunsTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR31Store()
		g := idempotency.NewGuard(s, idempotency.WithLogger(r31Quiet)) // FailOpenAfter default 10 s
		// The store fails every claim, the guard's probes' too (one a
		// second from the first failure), for 9.95 s: refused, not yet
		// open. The probe at 10 s opens it, as the two requests of K run.
		s.down.Store(true)
		for i := range 9 {
			_, _, err := g.Begin(context.Background(), "s", "other"+string(rune('a'+i)), "fp")
			require.Error(t, err)
			time.Sleep(time.Second)
		}
		time.Sleep(950 * time.Millisecond)
		firstIn := make(chan struct{})
		secondDone := make(chan struct{})
		var n atomic.Int64
		hook := func(ctx context.Context, key string) error {
			if strings.Contains(key, "probe") {
				return errR29Down
			}
			if !strings.HasSuffix(key, ":K") {
				return nil
			}
			if n.Add(1) == 1 {
				close(firstIn)
				<-secondDone // the store answers the second request first
				return errR29Down
			}
			return nil
		}
		s.beginHook.Store(&hook)
		var runs atomic.Int64
		var wg sync.WaitGroup
		run := func(after func()) {
			c, rec, err := g.Begin(context.Background(), "s", "K", "fp")
			if after != nil {
				after()
			}
			if err != nil || rec != nil {
				return
			}
			runs.Add(1)
			time.Sleep(100 * time.Millisecond) // the handler
			assert.NoError(t, c.Complete(context.Background(), idempotency.Record{Status: 201}))
		}
		s.down.Store(false)
		wg.Go(func() { run(nil) })
		<-firstIn
		wg.Go(func() { run(func() {}) })
		time.Sleep(60 * time.Millisecond) // past the probe that opens the guard; the second still runs
		synctest.Wait()
		close(secondDone)
		wg.Wait()
		assert.EqualValues(t, 1, runs.Load(), "one key ran twice, concurrently, on one process")
	})
}

// A spell in which the store answered most claims (3 of 4, at 400 claims
// a second), then the store down while the claims come slower (2 a
// second, as clients back off on 503). FailOpenAfter(1s) promises
// refusals end within d, "and at most 5 s more after a spell in which the
// store answered most claims": 6 s. The share is counted by claims, not by
// time, so the busy spell's answers outweigh the failures until they leave
// the 10 s window.
func TestReview31_RefusalsOutlastDPlus5AfterBusySpell(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR31Store()
		g := idempotency.NewGuard(s, idempotency.WithLogger(r31Quiet), idempotency.FailOpenAfter(time.Second))
		var n atomic.Int64
		hook := func(context.Context, string) error {
			if n.Add(1)%4 == 1 {
				return errR29Down
			}
			return nil
		}
		s.beginHook.Store(&hook)
		i := 0
		for range 3 { // 3 s busy, 3 of 4 claims answered
			for range 400 {
				i++
				c, _, err := g.Begin(context.Background(), "s", "busy"+itoaR31(i), "fp")
				if err == nil {
					require.NoError(t, c.Release(context.Background()))
				}
			}
			time.Sleep(time.Second)
		}
		s.beginHook.Store(nil)
		s.down.Store(true)
		start := time.Now()
		var served time.Duration
		for time.Since(start) < 20*time.Second {
			i++
			c, _, err := g.Begin(context.Background(), "s", "slow"+itoaR31(i), "fp")
			if err == nil {
				served = time.Since(start)
				require.NoError(t, c.Complete(context.Background(), idempotency.Record{Status: 201}))
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("first request served %v after the store went down", served)
		require.NotZero(t, served, "never failed open in 20 s")
		assert.LessOrEqual(t, served, 6*time.Second+500*time.Millisecond, "refused longer than FailOpenAfter + 5 s")
	})
}

func itoaR31(i int) string { return strconv.Itoa(i) }

// Complete is saving on a store that is down; the handler's own
// goroutine then marks the claim Completed (a CompleteTx that ran late).
// The renewals stop (keep returns on completed, the claim not lost) and
// awaitNextSave waits, past the lease's end, for a move to the local
// records that no renewal will make: does Complete ever return?
func TestReview31_CompletedDuringSaveLoopNeverEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR31Store()
		g := idempotency.NewGuard(s, idempotency.WithLogger(r31Quiet), idempotency.Lease(3*time.Second),
			idempotency.StoreTimeout(200*time.Millisecond))
		c, _, err := g.Begin(context.Background(), "s", "K", "fp")
		require.NoError(t, err)
		s.down.Store(true)
		done := make(chan error, 1)
		go func() { done <- c.Complete(context.Background(), idempotency.Record{Status: 201}) }()
		time.Sleep(100 * time.Millisecond)
		c.Completed()
		select {
		case err := <-done:
			t.Logf("Complete returned %v", err)
		case <-time.After(10 * time.Minute):
			t.Errorf("Complete still saving 10 min (200 leases) later")
			s.down.Store(false) // let it end, so that the bubble can exit
			c.Abandon()
			select {
			case <-done:
			case <-time.After(time.Hour):
				t.Fatal("Complete never returns, even with the store back")
			}
		}
	})
}
