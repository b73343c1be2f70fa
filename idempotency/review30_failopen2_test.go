package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errR30Down = errors.New("r30: store down")

var r30Quiet = slog.New(slog.DiscardHandler)

// r30Store is a store whose operations can each be made to fail, or be
// slowed, and counts its Begins.
type r30Store struct {
	mem                                *idempotency.MemoryStore
	failBegin, failRenew, failComplete atomic.Bool
	beginDelay                         atomic.Int64
	beginFn                            func(n int64) bool // if set: whether Begin number n fails
	begins                             atomic.Int64
	hang                               atomic.Bool // every call waits for its context's end
}

func (s *r30Store) hung(ctx context.Context) error {
	if !s.hang.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func newR30Store() *r30Store { return &r30Store{mem: idempotency.NewMemoryStore(0)} }

func (s *r30Store) failAll(v bool) {
	s.failBegin.Store(v)
	s.failRenew.Store(v)
	s.failComplete.Store(v)
}

func (s *r30Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if err := s.hung(ctx); err != nil {
		return nil, err
	}
	n := s.begins.Add(1)
	if d := time.Duration(s.beginDelay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.failBegin.Load() || (s.beginFn != nil && s.beginFn(n)) {
		return nil, errR30Down
	}
	return s.mem.Begin(ctx, key, claim, lease)
}

func (s *r30Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if err := s.hung(ctx); err != nil {
		return err
	}
	if s.failRenew.Load() {
		return errR30Down
	}
	return s.mem.Renew(ctx, key, claim, lease)
}

func (s *r30Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if err := s.hung(ctx); err != nil {
		return err
	}
	if s.failComplete.Load() {
		return errR30Down
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}

func (s *r30Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if err := s.hung(ctx); err != nil {
		return err
	}
	if s.failComplete.Load() {
		return errR30Down
	}
	return s.mem.Release(ctx, key, claim)
}

type r30Events struct {
	mu    sync.Mutex
	kinds []resilience.EventKind
}

func (e *r30Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, ev.Kind)
}

func (e *r30Events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.kinds {
		if x == k {
			n++
		}
	}
	return n
}

// runKey runs one request of key as a server would: Begin, then, if
// claimed, the handler (counted in runs) and Complete.
func runKey(t *testing.T, g *idempotency.Guard, key string, runs *atomic.Int64) (ran bool, rec *idempotency.Record, err error) {
	c, rec, err := g.Begin(context.Background(), "s", key, "fp")
	if err != nil || rec != nil {
		return false, rec, err
	}
	runs.Add(1)
	require.NoError(t, c.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("ok")}))
	return true, nil, nil
}

// openGuard fails the guard open on s (every op failing), and returns it.
func openGuard(t *testing.T, s *r30Store, ev *r30Events, opts ...idempotency.Option) *idempotency.Guard {
	opts = append([]idempotency.Option{idempotency.StoreTimeout(100 * time.Millisecond), idempotency.Lease(600 * time.Millisecond),
		idempotency.FailOpenAfter(0), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet)}, opts...)
	g := idempotency.NewGuard(s, opts...)
	s.failAll(true)
	var runs atomic.Int64
	ran, _, err := runKey(t, g, "opener", &runs)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, ev.count(resilience.EventSharedStateUnavailable))
	return g
}

// The request whose turn it is to probe claims its key on the store, which
// answers (slowly, within StoreTimeout); meanwhile a repeat of that key on
// the same process is not the probing one and claims the key on the local
// records. Both run: the same key runs twice, concurrently, on one process.
func TestReview30_ProbeTurnAndLocalRepeatBothRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		g := openGuard(t, s, ev)
		time.Sleep(1100 * time.Millisecond) // next request's turn to probe
		s.failAll(false)
		s.beginDelay.Store(int64(60 * time.Millisecond)) // the store answers, slowly

		var runs atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { _, _, errs[0] = runKeyHold(g, "K", &runs, 200*time.Millisecond) })
		time.Sleep(10 * time.Millisecond)
		wg.Go(func() { _, _, errs[1] = runKeyHold(g, "K", &runs, 200*time.Millisecond) })
		wg.Wait()
		t.Logf("errors: %v", errs)
		assert.EqualValues(t, 1, runs.Load(), "a key ran more than once on one process while failed open")
	})
}

// runKeyHold is runKey with a handler that takes d.
func runKeyHold(g *idempotency.Guard, key string, runs *atomic.Int64, d time.Duration) (bool, *idempotency.Record, error) {
	c, rec, err := g.Begin(context.Background(), "s", key, "fp")
	if err != nil || rec != nil {
		return false, rec, err
	}
	runs.Add(1)
	time.Sleep(d)
	return true, nil, c.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("ok")})
}

// While failed open, the probing request's key is claimed, run and saved on
// the store (which answered). A repeat of it on the same process, right
// after, is not the probe's turn: it goes to the local records, which do
// not have the key, and runs again.
func TestReview30_KeyRunOnStoreByProbeRunsAgainLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		g := openGuard(t, s, ev)
		time.Sleep(1100 * time.Millisecond)
		s.failAll(false) // the store is back

		var runs atomic.Int64
		ran, _, err := runKey(t, g, "K", &runs) // the probe's turn: claimed and saved on the store
		require.NoError(t, err)
		require.True(t, ran)
		ran, rec, err := runKey(t, g, "K", &runs) // a retry of it, same process
		t.Logf("second: ran=%v rec=%v err=%v", ran, rec != nil, err)
		assert.False(t, ran, "a key whose result this process saved on the store ran again on the same process")
		assert.EqualValues(t, 1, runs.Load())
	})
}

// A request runs on the store; the store goes down (every call fails) and
// no other keyed request comes: no claim fails, so the guard never fails
// open, and the running request is canceled at its lease's end, although
// the store has been failing for far longer than FailOpenAfter.
func TestReview30_RunningRequestCanceledWhenNoNewClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(50*time.Millisecond), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		c, rec, err := g.Begin(context.Background(), "s", "K", "fp")
		require.NoError(t, err)
		require.Nil(t, rec)
		s.failAll(true)
		select {
		case <-c.Context().Done():
			t.Logf("canceled after the store failed: cause %v", context.Cause(c.Context()))
		case <-time.After(3 * time.Second):
		}
		assert.NoError(t, c.Context().Err(), "request canceled though the store had failed for 60x FailOpenAfter")
		_ = c.Complete(context.Background(), idempotency.Record{Status: 201})
	})
}

// Control: the same, with another keyed request after FailOpenAfter, which
// fails the guard open: the running request then goes on.
func TestReview30_RunningRequestGoesOnWithNewClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(50*time.Millisecond), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		c, _, err := g.Begin(context.Background(), "s", "K", "fp")
		require.NoError(t, err)
		s.failAll(true)
		var runs atomic.Int64
		_, _, _ = runKey(t, g, "other1", &runs)
		time.Sleep(100 * time.Millisecond)
		_, _, _ = runKey(t, g, "other2", &runs)
		time.Sleep(3 * time.Second)
		assert.NoError(t, c.Context().Err())
		require.NoError(t, c.Complete(context.Background(), idempotency.Record{Status: 201}))
		_, rec, err := g.Begin(context.Background(), "s", "K", "fp")
		require.NoError(t, err)
		require.NotNil(t, rec, "replayed from the local records")
	})
}

// A store whose claims get through but whose renewals fail (say a script
// or a permission that only Renew needs): no claim fails, so the guard
// never fails open, and every request longer than its lease is canceled,
// although a plain server would have completed it.
func TestReview30_RenewOnlyFailuresCancelLongRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		s.failRenew.Store(true)
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(50*time.Millisecond), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		var canceled atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				c, _, err := g.Begin(context.Background(), "s", string(rune('a'+i)), "fp")
				if err != nil {
					return
				}
				select {
				case <-c.Context().Done():
					canceled.Add(1)
				case <-time.After(2 * time.Second):
				}
				_ = c.Complete(context.Background(), idempotency.Record{Status: 201})
			})
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		t.Logf("canceled %d of 20, EventLeaseLost %d, unavailable %d", canceled.Load(), ev.count(resilience.EventLeaseLost), ev.count(resilience.EventSharedStateUnavailable))
		assert.Zero(t, canceled.Load())
	})
}

// A store that fails one claim in three for a while (refusing a third of
// the requests, by design), then fails every claim: the guard fails open
// only once the failures since the first one catch up with the successes,
// however long after FailOpenAfter that is.
func TestReview30_FlakyPeriodDelaysFailOpenWithoutTimeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		var full atomic.Bool
		s.beginFn = func(n int64) bool { return full.Load() || n%3 == 0 }
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(time.Second), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		var runs atomic.Int64
		for i := range 600 { // 60 s of 10 requests a second, one in three refused
			_, _, _ = runKey(t, g, "flaky"+string(rune(i)), &runs)
			time.Sleep(100 * time.Millisecond)
		}
		full.Store(true)
		start := time.Now()
		refused := 0
		for i := range 600 { // the store now fails every claim
			_, _, err := runKey(t, g, "down"+string(rune(i)), &runs)
			if err == nil {
				break
			}
			refused++
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("store wholly down: %d requests refused over %v before failing open (FailOpenAfter 1s)", refused, time.Since(start))
		// Bounded whatever the flaky period's length: FailOpenAfter once
		// half the calls of the last 10 s fail, which a window of
		// answered calls delays by at most half of it.
		assert.Less(t, time.Since(start), 6500*time.Millisecond)
	})
}

// Extreme FailOpenAfter values.
func TestReview30_ExtremeFailOpenAfter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, time.Duration(1<<63 - 1), -1} {
		synctest.Test(t, func(t *testing.T) {
			s, ev := newR30Store(), &r30Events{}
			g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
				idempotency.FailOpenAfter(d), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
			s.failAll(true)
			var runs atomic.Int64
			_, _, err1 := runKey(t, g, "a", &runs)
			time.Sleep(time.Second)
			_, _, err2 := runKey(t, g, "b", &runs)
			t.Logf("FailOpenAfter %v: %v / %v", d, err1, err2)
			if d >= 0 && d < time.Second {
				assert.NoError(t, err2)
			} else {
				assert.Error(t, err2)
			}
		})
	}
}

// A store that answers three claims in a row, then fails the next nine, and
// so on (fails 75% of claims): each run of three ends the outage, and the
// next failure begins a new one, whose clock starts again, so the guard
// never fails open and three requests in four are refused without end.
func TestReview30_ThreeOKThenBurstRefusesMostForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		s.beginFn = func(n int64) bool { return (n-1)%12 >= 3 }
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(time.Second), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		var runs atomic.Int64
		refused := 0
		for i := range 600 { // 60 s, 10 requests a second
			if _, _, err := runKey(t, g, "k"+string(rune(i)), &runs); err != nil {
				refused++
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("refused %d of 600 over 60 s with FailOpenAfter 1s; unavailable events %d", refused, ev.count(resilience.EventSharedStateUnavailable))
		assert.LessOrEqual(t, refused, 300, "a store failing 3 claims in 4 refused most requests without end")
	})
}

// The request completes around its lease's end while the store hangs and
// the guard has failed open: its claim moves to the local records, and its
// result is saved there, not lost, and its context not canceled, wherever
// Complete falls.
func TestReview30_CompleteAroundMoveLocal(t *testing.T) {
	for _, hang := range []bool{false, true} {
		for off := -150 * time.Millisecond; off <= 250*time.Millisecond; off += 10 * time.Millisecond {
			synctest.Test(t, func(t *testing.T) {
				s, ev := newR30Store(), &r30Events{}
				g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
					idempotency.FailOpenAfter(0), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
				c, _, err := g.Begin(context.Background(), "s", "K", "fp")
				require.NoError(t, err)
				s.failAll(true)
				s.hang.Store(hang)
				var runs atomic.Int64
				_, _, err = runKey(t, g, "opener", &runs)
				require.NoError(t, err)
				time.Sleep(600*time.Millisecond + off)
				canceledBefore := c.Context().Err()
				err = c.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("r")})
				ran, rec, err2 := runKey(t, g, "K", &runs)
				if !assert.NoError(t, canceledBefore, "offset %v", off) || !assert.NoError(t, err, "offset %v", off) ||
					!assert.False(t, ran, "offset %v", off) || !assert.NoError(t, err2, "offset %v", off) || !assert.NotNil(t, rec, "offset %v", off) {
					t.Logf("hang %v offset %v: ran=%v err=%v err2=%v", hang, off, ran, err, err2)
				}
				time.Sleep(7 * time.Second) // the orphan reaping's rounds end: 10 leases at most while the store fails
			})
		}
	}
}

// Many distinct keys during a long outage: the local records stay bounded.
func TestReview30_LocalRecordsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ev := newR30Store(), &r30Events{}
		g := idempotency.NewGuard(s, idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(600*time.Millisecond),
			idempotency.FailOpenAfter(0), idempotency.WithListener(ev), idempotency.WithLogger(r30Quiet))
		s.failAll(true)
		var runs atomic.Int64
		refused := 0
		for i := range 50000 {
			c, _, err := g.Begin(context.Background(), "s", "key-"+string(rune(i+100)), "fp")
			if err != nil {
				refused++
				continue
			}
			runs.Add(1)
			_ = c.Complete(context.Background(), idempotency.Record{Status: 200, Body: make([]byte, 2048)})
		}
		t.Logf("refused %d, ran %d, unavailable events %d, failed %d", refused, runs.Load(), ev.count(resilience.EventSharedStateUnavailable), ev.count(resilience.EventStoreFailed))
		assert.Zero(t, refused)
		assert.Equal(t, 1, ev.count(resilience.EventSharedStateUnavailable))
	})
}
