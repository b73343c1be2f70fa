package idempotency_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r17store wraps a store with faults switched on and off.
type r17store struct {
	idempotency.Store
	mu                                          sync.Mutex
	failBegin, failRenew, failComplete, failRel bool
	hang                                        bool          // failing calls hang until ctx ends instead
	beginLag                                    time.Duration // after the inner Begin succeeds
	calls                                       map[string]int
}

var errR17 = errors.New("r17: store down")

func (s *r17store) fail(ctx context.Context, op string, on bool) error {
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[op]++
	hang := s.hang
	s.mu.Unlock()
	if !on {
		return nil
	}
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errR17
}

func (s *r17store) set(f func(s *r17store)) { s.mu.Lock(); f(s); s.mu.Unlock() }
func (s *r17store) get() r17store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r17store{failBegin: s.failBegin, failRenew: s.failRenew, failComplete: s.failComplete, failRel: s.failRel, beginLag: s.beginLag}
}

func (s *r17store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if err := s.fail(ctx, "begin", s.get().failBegin); err != nil {
		return nil, err
	}
	rec, err := s.Store.Begin(ctx, key, claim, lease)
	if lag := s.get().beginLag; lag > 0 {
		time.Sleep(lag)
	}
	return rec, err
}
func (s *r17store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if err := s.fail(ctx, "renew", s.get().failRenew); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, claim, lease)
}
func (s *r17store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if err := s.fail(ctx, "complete", s.get().failComplete); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, claim, rec, ttl)
}
func (s *r17store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if err := s.fail(ctx, "release", s.get().failRel); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, claim)
}

type r17events struct {
	mu    sync.Mutex
	kinds map[resilience.EventKind]int
}

func (e *r17events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[resilience.EventKind]int{}
	}
	e.kinds[ev.Kind]++
}
func (e *r17events) n(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kinds[k]
}

func TestR17StoreFailsAtBegin(t *testing.T) {
	for _, hang := range []bool{false, true} {
		s := &r17store{Store: idempotency.NewMemoryStore(0), failBegin: true, hang: hang}
		var runs atomic.Int64
		srv := r17srv(t, s, func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(201) })
		start := time.Now()
		resp, _ := r17post(t, srv.URL, "k", "{}")
		took := time.Since(start)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		assert.Less(t, took, 1200*time.Millisecond)
		assert.EqualValues(t, 0, runs.Load())
		s.set(func(s *r17store) { s.failBegin = false })
		resp, _ = r17post(t, srv.URL, "k", "{}")
		assert.Equal(t, 201, resp.StatusCode, "hang=%v", hang)
		resp, _ = r17post(t, srv.URL, "k", "{}")
		assert.Equal(t, 201, resp.StatusCode)
		assert.Equal(t, "true", resp.Header.Get(idempotency.ReplayedHeader))
		assert.EqualValues(t, 1, runs.Load())
	}
}

// Renewals fail (or hang) for half the lease while a slow handler runs;
// saves fail for a while after it ends: one run, repeats 409 then the replay.
func TestR17RenewAndCompleteOutages(t *testing.T) {
	for _, hang := range []bool{false, true} {
		s := &r17store{Store: idempotency.NewMemoryStore(0), hang: hang}
		var ev r17events
		var runs atomic.Int64
		srv := r17srv(t, s, func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			time.Sleep(1500 * time.Millisecond)
			if err := r.Context().Err(); err != nil {
				t.Logf("handler ctx: %v %v", err, context.Cause(r.Context()))
			}
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "done")
		}, idempotency.Lease(900*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond), idempotency.WithListener(&ev))
		go func() {
			time.Sleep(350 * time.Millisecond)
			s.set(func(s *r17store) { s.failRenew = true })
			time.Sleep(450 * time.Millisecond)
			s.set(func(s *r17store) { s.failRenew = false })
			time.Sleep(650 * time.Millisecond)
			s.set(func(s *r17store) { s.failComplete = true })
			time.Sleep(500 * time.Millisecond)
			s.set(func(s *r17store) { s.failComplete = false })
		}()
		var first *http.Response
		done := make(chan struct{})
		go func() { defer close(done); first, _ = r17post(t, srv.URL, "k", "{}") }()
		codes := map[int]int{}
		for range 20 {
			time.Sleep(100 * time.Millisecond)
			resp, _ := r17post(t, srv.URL, "k", "{}")
			codes[resp.StatusCode]++
		}
		<-done
		// The first client has its answer once a first try to save it
		// failed; the save goes on behind it: a repeat gets 409 until then.
		resp, body := r17post(t, srv.URL, "k", "{}")
		for end := time.Now().Add(3 * time.Second); resp.StatusCode == http.StatusConflict && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
			resp, body = r17post(t, srv.URL, "k", "{}")
		}
		t.Logf("hang=%v first %d, repeats %v, last %d %s replayed=%q, events lost=%d notstored=%d failed=%d", hang, first.StatusCode, codes,
			resp.StatusCode, body, resp.Header.Get(idempotency.ReplayedHeader),
			ev.n(resilience.EventLeaseLost), ev.n(resilience.EventNotStored), ev.n(resilience.EventStoreFailed))
		assert.EqualValues(t, 1, runs.Load())
		assert.Equal(t, 201, resp.StatusCode)
	}
}

// The release of a 503 fails: a retry gets 409 (not a second run
// meanwhile), and runs once the lease is out.
func TestR17ReleaseFails(t *testing.T) {
	s := &r17store{Store: idempotency.NewMemoryStore(0), failRel: true}
	var runs atomic.Int64
	var ev r17events
	srv := r17srv(t, s, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
	}, idempotency.Lease(600*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond), idempotency.WithListener(&ev))
	start := time.Now()
	resp, _ := r17post(t, srv.URL, "k", "{}")
	t.Logf("first %d after %v", resp.StatusCode, time.Since(start))
	resp, _ = r17post(t, srv.URL, "k", "{}")
	assert.Equal(t, 409, resp.StatusCode)
	// The 503 goes out once a first try to free the key has failed; the
	// others follow it.
	require.Eventually(t, func() bool { return ev.n(resilience.EventStoreFailed) > 0 }, 2*time.Second, 10*time.Millisecond)
	s.set(func(s *r17store) { s.failRel = false })
	time.Sleep(700 * time.Millisecond)
	resp, _ = r17post(t, srv.URL, "k", "{}")
	assert.Equal(t, 201, resp.StatusCode)
	assert.EqualValues(t, 2, runs.Load())
	assert.Positive(t, ev.n(resilience.EventStoreFailed))
}

// The claim is written but Begin's answer comes late: is LeaseDeadline
// the store's lease, or later?
func TestR17LeaseDeadlineAfterASlowBegin(t *testing.T) {
	s := &r17store{Store: idempotency.NewMemoryStore(0), beginLag: 400 * time.Millisecond}
	var deadline time.Time
	var claimed time.Time
	lease := 1500 * time.Millisecond
	h := idempotency.Middleware(s, idempotency.SharedKeys(), r17quiet, idempotency.Lease(lease), idempotency.StoreTimeout(500*time.Millisecond))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			deadline = idempotency.FromContext(r.Context()).LeaseDeadline()
			w.WriteHeader(201)
		}))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, "k")
	claimed = time.Now() // the claim is written at once, its answer 400 ms later
	h.ServeHTTP(httptest.NewRecorder(), req)
	over := deadline.Sub(claimed.Add(lease))
	t.Logf("LeaseDeadline is %v past the store's lease", over)
	assert.Less(t, over, 50*time.Millisecond, "the guard believes its lease runs longer than the store holds it")
}

// A huge lease: the handler's WithLeaseDeadline context.
func TestR17HugeLease(t *testing.T) {
	for _, lease := range []time.Duration{240 * 365 * 24 * time.Hour, 100 * 365 * 24 * time.Hour, time.Duration(math.MaxInt64)} {
		var ctxErr error
		var dl time.Time
		h := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys(), r17quiet, idempotency.Lease(lease))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c := idempotency.FromContext(r.Context())
				dl = c.LeaseDeadline()
				ctx, cancel := c.WithLeaseDeadline(r.Context())
				defer cancel()
				time.Sleep(20 * time.Millisecond)
				ctxErr = ctx.Err()
				w.WriteHeader(201)
			}))
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		t.Logf("lease %v: LeaseDeadline %v, ctx err %v", lease, dl, ctxErr)
		assert.NoError(t, ctxErr, "lease %v", lease)
		assert.True(t, dl.After(time.Now()), "lease %v: deadline %v", lease, dl)
	}
}

var _ = require.NoError

// The holder's replica alone is cut off from the store for its renewals,
// ending 100 ms before the lease granted by its last renewal runs out,
// while another replica hammers the key: one run.
func TestR17PartitionedHolderNearTheLeaseEnd(t *testing.T) {
	for _, hang := range []bool{false, true} {
		mem := idempotency.NewMemoryStore(0)
		sa := &r17store{Store: mem, hang: hang}
		var runs atomic.Int64
		h := func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			time.Sleep(1500 * time.Millisecond)
			w.WriteHeader(201)
		}
		opts := []idempotency.Option{idempotency.Lease(900 * time.Millisecond), idempotency.StoreTimeout(100 * time.Millisecond)}
		a := r17srv(t, sa, h, opts...)
		b := r17srv(t, mem, h, opts...)
		start := time.Now()
		done := make(chan int)
		go func() { resp, _ := r17post(t, a.URL, "k", "{}"); done <- resp.StatusCode }()
		// renewals at about 0.3, 0.6 s; cut from 0.62 s, the lease then ends near 1.5 s
		time.Sleep(620 * time.Millisecond)
		sa.set(func(s *r17store) { s.failRenew = true })
		stop := time.After(time.Until(start.Add(1350 * time.Millisecond)))
		codes := map[int]int{}
	loop:
		for {
			select {
			case <-stop:
				break loop
			default:
			}
			resp, _ := r17post(t, b.URL, "k", "{}")
			codes[resp.StatusCode]++
			time.Sleep(5 * time.Millisecond)
		}
		sa.set(func(s *r17store) { s.failRenew = false })
		for time.Since(start) < 2500*time.Millisecond {
			resp, _ := r17post(t, b.URL, "k", "{}")
			codes[resp.StatusCode]++
			time.Sleep(20 * time.Millisecond)
		}
		first := <-done
		t.Logf("hang=%v first %d, other replica %v, runs %d", hang, first, codes, runs.Load())
		assert.EqualValues(t, 1, runs.Load())
	}
}
