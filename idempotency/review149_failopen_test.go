package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// review149Store wraps a MemoryStore (so that the guard has local records
// to fail open to: it is not a *MemoryStore) and fails Begin while down,
// or the next failNext Begins.
type review149Store struct {
	*idempotency.MemoryStore
	down     atomic.Bool
	failNext atomic.Int32
	begins   atomic.Int32
}

var errReview149Down = errors.New("review149: store down")

func (s *review149Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.begins.Add(1)
	if s.down.Load() {
		return nil, errReview149Down
	}
	if s.failNext.Add(-1) >= 0 {
		return nil, errReview149Down
	}
	s.failNext.Store(0)
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

func (s *review149Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.down.Load() {
		return errReview149Down
	}
	return s.MemoryStore.Renew(ctx, key, claim, lease)
}

func (s *review149Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.down.Load() {
		return errReview149Down
	}
	return s.MemoryStore.Complete(ctx, key, claim, rec, ttl)
}

func (s *review149Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.down.Load() {
		return errReview149Down
	}
	return s.MemoryStore.Release(ctx, key, claim)
}

var review149Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// review149Replica returns a replica's handler on store, counting the
// handler's runs by key.
func review149Replica(store idempotency.Store, runs *sync.Map, opts ...idempotency.Option) http.Handler {
	opts = append([]idempotency.Option{idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet)}, opts...)
	return idempotency.Middleware(store, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get(idempotency.Header)
		v, _ := runs.LoadOrStore(k, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %s", k)
	}))
}

func review149Do(h http.Handler, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func review149Count(runs *sync.Map, key string) int32 {
	v, ok := runs.Load(key)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

// FailOpenAfter(0) fails the guard open at the store's first failure,
// however transient: a key whose result the store holds then runs again
// on this replica, until three probes a second apart answer (documented
// since review149, where a reader took 0 for "off"). With any d > 0, one
// transient error of a healthy store is refused, not failed open, and the
// stored key is replayed.
func TestReview149FailOpenAfterZeroOneBlipRunsAStoredKeyAgain(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		runs int32
	}{{0, 2}, {time.Nanosecond, 1}, {time.Second, 1}} {
		t.Run(tc.d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &review149Store{MemoryStore: idempotency.NewMemoryStore(0)}
				var runs sync.Map
				a := review149Replica(store, &runs, idempotency.FailOpenAfter(tc.d))
				b := review149Replica(store, &runs, idempotency.FailOpenAfter(tc.d))
				if w := review149Do(a, "paid-1"); w.Code != http.StatusCreated {
					t.Fatalf("first run: %d", w.Code)
				}
				store.failNext.Store(1) // one latency spike on B's next claim
				w := review149Do(b, "other-1")
				t.Logf("the claim that met the blip: %d", w.Code)
				time.Sleep(100 * time.Millisecond)
				w = review149Do(b, "paid-1") // the store is healthy again, and holds paid-1's answer
				t.Logf("repeat of paid-1 on B after one blip: %d replayed=%q", w.Code, w.Header().Get(idempotency.ReplayedHeader))
				if got := review149Count(&runs, "paid-1"); got != tc.runs {
					t.Errorf("FailOpenAfter(%v): paid-1 ran %d times after one transient store error, want %d", tc.d, got, tc.runs)
				}
				time.Sleep(5 * time.Second) // the guards' probes end
			})
		})
	}
}

// "So a refusal for want of a store lasts a bounded time": "at most 5 s
// more [than FailOpenAfter] after a spell in which it answered most,
// whatever the rate of claims". But a failure after ten seconds without a
// claim is taken as the first of its own (review116's fix), so a guard
// that sees a keyed request once every 10 s (a quiet service, or one
// client retrying with a backoff of 10 s or more) never fails open: a
// store down for good refuses every request for good, where a plain
// server would have served them all.
func TestReview149SparseRequestsToADeadStoreAreRefusedForever(t *testing.T) {
	for _, every := range []time.Duration{5 * time.Second, 9500 * time.Millisecond, 10 * time.Second, 30 * time.Second} {
		t.Run(every.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &review149Store{MemoryStore: idempotency.NewMemoryStore(0)}
				store.down.Store(true)
				var runs sync.Map
				h := review149Replica(store, &runs) // FailOpenAfter: the default, 10 s
				time.Sleep(300 * time.Millisecond)  // a phase within the second
				start := time.Now()
				var refusedLate, total int
				for i := 0; time.Since(start) < 5*time.Minute; i++ {
					w := review149Do(h, fmt.Sprintf("k-%d", i))
					total++
					if w.Code == http.StatusServiceUnavailable && time.Since(start) > 10*time.Second+5*time.Second+every {
						refusedLate++
					}
					time.Sleep(every)
				}
				t.Logf("one request each %v to a store down for 5 min: %d of %d refused past FailOpenAfter (10 s) + 5 s", every, refusedLate, total)
				if refusedLate > 0 {
					t.Errorf("a store down for good refused %d of %d requests past the documented bound", refusedLate, total)
				}
			})
		})
	}
}

// "A store that fails or hangs as a handler ends holds a short answer for
// one StoreTimeout, no longer for as long as the save is retried (up to a
// lease)". A handler that panics after its status (or calls Goexit) is
// held, with its connection and its client, for as long as the 500 is
// retried: the whole lease, with FailOpenAfter(-1); a plain server would
// have dropped the connection at once. Compare a handler that returns:
// its answer goes out after one StoreTimeout.
func TestReview149PanicAfterStatusHeldForTheLeaseByAFrozenStore(t *testing.T) {
	for _, how := range []string{"return", "panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &review149Flaky{MemoryStore: idempotency.NewMemoryStore(0), hang: true} // frozen once down
				h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet),
					idempotency.Lease(30*time.Second), idempotency.StoreTimeout(500*time.Millisecond), idempotency.FailOpenAfter(-1))(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.WriteHeader(http.StatusCreated)
						io.WriteString(w, "ok")
						store.down.Store(true) // the store freezes as the handler ends
						switch how {
						case "panic":
							panic(http.ErrAbortHandler)
						case "goexit":
							runtime.Goexit()
						}
					}))
				start := time.Now()
				done := make(chan struct{})
				tw := &review149TimedWriter{ResponseRecorder: httptest.NewRecorder()}
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
					req.Header.Set(idempotency.Header, "k")
					h.ServeHTTP(tw, req)
				}()
				<-done
				ended := time.Since(start)
				// The client learns the outcome when the answer goes out, or,
				// for a panic or Goexit, when net/http drops the connection:
				// as the handler's goroutine ends.
				learned := ended
				if !tw.at.IsZero() {
					learned = tw.at.Sub(start)
				}
				t.Logf("%s: the client learned its outcome after %v (handler goroutine ended after %v)", how, learned, ended)
				if learned > 2*time.Second {
					t.Errorf("%s after 201 with a frozen store: the client held %v; a plain server ends it at once, and a handler that returns gets its answer out after one StoreTimeout", how, learned)
				}
				store.down.Store(false) // the save goes on meanwhile, and ends
				time.Sleep(30 * time.Second)
			})
		})
	}
}

// review149TimedWriter notes when the status went out to the client.
type review149TimedWriter struct {
	*httptest.ResponseRecorder
	at time.Time
}

func (w *review149TimedWriter) WriteHeader(code int) {
	if w.at.IsZero() {
		w.at = time.Now()
	}
	w.ResponseRecorder.WriteHeader(code)
}

// The same over a real connection: the client of a handler that panicked
// after its 201 waits the whole lease (3 s here) for its connection to be
// dropped; a plain server drops it at once.
func TestReview149PanicAfterStatusHoldsTheClientOverHTTP(t *testing.T) {
	store := &review149Flaky{MemoryStore: idempotency.NewMemoryStore(0), hang: true} // frozen once down
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(review149Quiet),
		idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond), idempotency.FailOpenAfter(-1))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "ok")
			store.down.Store(true)
			panic(http.ErrAbortHandler)
		}))
	ts := httptest.NewServer(h)
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, "k")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err == nil {
		resp.Body.Close()
	}
	t.Logf("client: %v after %v", err, took)
	if took > time.Second {
		t.Errorf("the client of a handler that panicked after 201 waited %v (the lease) for its connection to drop", took)
	}
	// The save goes on meanwhile: once the store thaws, a repeat gets the
	// 500 it stored, replayed (and its goroutines return).
	store.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusInternalServerError && resp.Header.Get(idempotency.ReplayedHeader) == "true" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 500 never stored once the store thawed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
}
