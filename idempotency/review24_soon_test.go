package idempotency_test

// Review 24: the save behind the answer (Claim.completeSoon) and the
// background freeing of the claims Begins gave up on (Guard.reap).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r24Listener func(resilience.Event)

func (f r24Listener) OnEvent(e resilience.Event) { f(e) }

var errR24Blip = errors.New("review24: store blip")
var errR24Dead = errors.New("review24: the process has exited: no call reaches the store")

// r24Store is a replica's view of a shared MemoryStore, with faults.
type r24Store struct {
	inner *idempotency.MemoryStore

	failCompleteUntil atomic.Int64 // Complete fails fast until then (unix nanos)
	dead              atomic.Bool  // the replica's process is gone: nothing it sends lands
	frozen            atomic.Bool  // every call hangs until its context ends
	completeCalls     atomic.Int32
	panicOnComplete   atomic.Int32 // the n-th Complete panics (0: none)
	failFirstComplete atomic.Bool  // the first Complete fails fast

	// lateBegins: the next Begins hang until their context ends, and their
	// write lands lateBy after that (as a write whose answer was lost).
	lateBegins atomic.Int32
	lateBy     time.Duration
	landed     chan string // the token of each late write, once landed
	releases   atomic.Int32
}

func (s *r24Store) gate(ctx context.Context) error {
	if s.dead.Load() {
		return errR24Dead
	}
	if s.frozen.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *r24Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.lateBegins.Add(-1) >= 0 {
		<-ctx.Done()
		go func() {
			time.Sleep(s.lateBy)
			_, _ = s.inner.Begin(context.Background(), key, claim, lease)
			if s.landed != nil {
				s.landed <- claim.Token
			}
		}()
		return nil, ctx.Err()
	}
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	return s.inner.Begin(ctx, key, claim, lease)
}

func (s *r24Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.inner.Renew(ctx, key, claim, lease)
}

func (s *r24Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	n := s.completeCalls.Add(1)
	if p := s.panicOnComplete.Load(); p != 0 && n == p {
		panic("review24: the store's Complete panicked")
	}
	if n == 1 && s.failFirstComplete.Load() {
		return errR24Blip
	}
	if err := s.gate(ctx); err != nil {
		return err
	}
	if time.Now().UnixNano() < s.failCompleteUntil.Load() {
		return errR24Blip
	}
	return s.inner.Complete(ctx, key, claim, rec, ttl)
}

func (s *r24Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	s.releases.Add(1)
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.inner.Release(ctx, key, claim)
}

type r24Answer struct {
	status   int
	replayed bool
	body     string
	err      error
}

func r24Post(url, key string) r24Answer {
	req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r24Answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return r24Answer{status: resp.StatusCode, replayed: resp.Header.Get(idempotency.ReplayedHeader) == "true", body: string(b)}
}

// A replica stopped gracefully (http.Server.Shutdown, as on SIGTERM in a
// rolling deploy) while the save of a finished request is being retried
// behind its answer. Shutdown waits for handlers, so before 48d6324 it
// waited for the save, which got through once the blip ended (400 ms, far
// inside the lease). Now the save runs on a goroutine that nothing waits
// for: Shutdown returns at once, the process exits, the save is lost with
// no EventNotStored, and a retry after the lease runs the handler again.
func TestReview24ShutdownDropsTheSaveBehindTheAnswer(t *testing.T) {
	const lease, st = 1500 * time.Millisecond, 100 * time.Millisecond
	inner := idempotency.NewMemoryStore(0) // shared by the replicas, as Redis is
	a := &r24Store{inner: inner}
	var notStoredA atomic.Int32
	listenA := r24Listener(func(e resilience.Event) {
		if e.Kind == resilience.EventNotStored {
			notStoredA.Add(1)
		}
	})
	var runs atomic.Int32
	handler := func(asEnds func()) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			asEnds()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "order %d", n)
		})
	}
	// Replica A: the store blips for 400 ms as the handler ends.
	mwA := idempotency.Middleware(a, idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.WithListener(listenA))
	srvA := &http.Server{Handler: mwA(handler(func() { a.failCompleteUntil.Store(time.Now().Add(400 * time.Millisecond).UnixNano()) }))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srvA.Serve(ln) }()
	// Replica B, on the same store.
	mwB := idempotency.Middleware(inner, idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(st))
	srvB := httptest.NewServer(mwB(handler(func() {})))
	defer srvB.Close()

	first := r24Post("http://"+ln.Addr().String(), "order-key-1")
	require.NoError(t, first.err)
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, "order 1", first.body)

	// SIGTERM: the replica shuts down gracefully, then its main returns.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srvA.Shutdown(ctx))
	took := time.Since(start)
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	saving := strings.Contains(stacks, "saveAgain")
	atShutdown := r24Post(srvB.URL, "order-key-1") // what the store holds as Shutdown returns
	a.dead.Store(true)                             // the process exits: its goroutines die with it
	notStoredAtExit := notStoredA.Load()
	t.Logf("Shutdown returned after %v; a save goroutine still running: %v; a repeat then: %d replayed=%v; EventNotStored before exit: %d",
		took, saving, atShutdown.status, atShutdown.replayed, notStoredAtExit)

	// The client's retry (its answer was lost on the way, which the server
	// cannot know) after the lease.
	var retry r24Answer
	for deadline := time.Now().Add(lease + 3*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if retry = r24Post(srvB.URL, "order-key-1"); retry.err != nil || retry.status != http.StatusConflict {
			break
		}
	}
	t.Logf("the retry after the lease: %d replayed=%v %q; handler runs: %d", retry.status, retry.replayed, retry.body, runs.Load())
	assert.False(t, saving, "Shutdown returned while the save was still being retried behind the answer")
	assert.EqualValues(t, 1, runs.Load(), "the handler ran twice: the save behind the answer died with the gracefully stopped process")
	assert.True(t, retry.replayed, "the retry should get the first run's answer replayed")
	assert.Equal(t, "order 1", retry.body)
	if notStoredAtExit == 0 && runs.Load() > 1 {
		t.Errorf("and the loss was silent: no EventNotStored was reported before the process exited")
	}
	time.Sleep(lease) // let A's goroutines end (the package's TestMain checks for leaks)
}

// The store panics on the second try of a save, which now runs on a
// goroutine of its own behind the answer: the panic is not recovered
// there and ends the process, with every request in flight on it. On the
// request's goroutine (the first try, or before 48d6324), net/http
// recovers it and the process goes on; reap, the other goroutine added in
// these changes, recovers a store's panic for just this reason ("on no
// request's goroutine, so not to end the process").
func TestReview24StorePanicBehindTheAnswerEndsTheProcess(t *testing.T) {
	if mode := os.Getenv("REVIEW24_CHILD"); mode != "" {
		r24PanicChild(mode)
		return
	}
	for _, mode := range []string{"first-try", "second-try"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestReview24StorePanicBehindTheAnswerEndsTheProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "REVIEW24_CHILD="+mode)
			out, err := cmd.CombinedOutput()
			t.Logf("child (%s): err=%v\n%s", mode, err, lastLines(string(out), 12))
			assert.Contains(t, string(out), "REVIEW24 SURVIVED", "the process ended on the store's panic")
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func r24PanicChild(mode string) {
	s := &r24Store{inner: idempotency.NewMemoryStore(0)}
	if mode == "first-try" {
		s.panicOnComplete.Store(1)
	} else {
		s.failFirstComplete.Store(true)
		s.panicOnComplete.Store(2)
	}
	mw := idempotency.Middleware(s, idempotency.SharedKeys(), idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order 1")
	})))
	a := r24Post(srv.URL, "k")
	fmt.Println("REVIEW24 answer:", a.status, a.err)
	time.Sleep(700 * time.Millisecond) // the save's retries come 20, 40, 80 ms apart
	fmt.Println("REVIEW24 SURVIVED")
	os.Exit(0)
}

// reap frees only the claim its Begin gave up on: a claim of the same key
// taken meanwhile, on the same replica or another, holds through every
// round, and a saved result is never freed; no goroutine is left once the
// rounds end.
func TestReview24ReapFreesOnlyTheOrphan(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const lease, st = 3 * time.Second, 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		lateBy time.Duration // when the orphan's write lands after its Begin gave up
		again  string        // where the key is begun again: "A" (same replica) or "B"
	}{
		{"lands before round 1, begun again on B", 30 * time.Millisecond, "B"},
		{"lands before round 1, begun again on A", 30 * time.Millisecond, "A"},
		{"lands after B took the key", 150 * time.Millisecond, "B"},
		{"lands after A took the key", 150 * time.Millisecond, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := idempotency.NewMemoryStore(0)
			a := &r24Store{inner: inner, lateBy: tc.lateBy, landed: make(chan string, 4)}
			a.lateBegins.Store(1)
			var runs atomic.Int32
			slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				time.Sleep(600 * time.Millisecond) // across every reap round
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "order %d", n)
			})
			opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(st)}
			srvA := httptest.NewServer(idempotency.Middleware(a, opts...)(slow))
			defer srvA.Close()
			srvB := httptest.NewServer(idempotency.Middleware(inner, opts...)(slow))
			defer srvB.Close()
			srvC := httptest.NewServer(idempotency.Middleware(inner, opts...)(slow))
			defer srvC.Close()

			first := r24Post(srvA.URL, "k")
			require.Equal(t, http.StatusServiceUnavailable, first.status) // Begin gave up
			if tc.lateBy > 100*time.Millisecond {
				time.Sleep(50 * time.Millisecond) // begin again before the orphan lands
			} else {
				<-a.landed // the orphan holds the key
			}
			url := srvB.URL
			if tc.again == "A" {
				url = srvA.URL
			}
			// The key begun again, until it runs (the orphan freed).
			began := time.Now()
			var second r24Answer
			var wg sync.WaitGroup
			runningBefore := runs.Load()
			for time.Since(began) < lease+time.Second {
				wg.Add(1)
				done := make(chan r24Answer, 1)
				go func() { defer wg.Done(); done <- r24Post(url, "k") }()
				// While it runs, repeats on C must get 409, through the rounds.
				var during []int
				for range 8 {
					time.Sleep(60 * time.Millisecond)
					if runs.Load() > runningBefore {
						during = append(during, r24Post(srvC.URL, "k").status)
					}
				}
				second = <-done
				wg.Wait()
				if runs.Load() > runningBefore {
					for _, s := range during {
						assert.Equal(t, http.StatusConflict, s, "a repeat ran or was refused otherwise while the key's request ran: %v", during)
					}
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("begun again on %s: %d %q after %v; runs %d", tc.again, second.status, second.body, time.Since(began).Round(time.Millisecond), runs.Load())
			require.Equal(t, http.StatusCreated, second.status)
			assert.EqualValues(t, 1, runs.Load())
			time.Sleep(6 * st) // every round over, and the late write landed
			for _, u := range []string{srvA.URL, srvB.URL, srvC.URL} {
				r := r24Post(u, "k")
				assert.True(t, r.replayed && r.body == "order 1", "the saved result was freed or lost: %d %q", r.status, r.body)
			}
			assert.EqualValues(t, 1, runs.Load())
		})
	}
}

// The reaper's first round asks the store to free the orphan before the
// orphan's write has landed: the store answers ErrNotOwner, and reap
// forgets it. When the write lands, the claim holds the key for a whole
// lease with nothing running, and even the replica that left it refuses
// its key (409): before 155e8ea, that replica's next Begin of the key
// freed it ("left to g's next Begin of their keys, which frees them"), and
// the request ran. (With PostgreSQL and pgx's default context handling, a
// Begin's INSERT blocked on the row lock of a transaction goes on in the
// server after the client gave up, and lands once the lock is released.)
func TestReview24ReapForgetsAnOrphanThatLandsAfterItsFirstRound(t *testing.T) {
	const lease, st = 2 * time.Second, 100 * time.Millisecond
	inner := idempotency.NewMemoryStore(0)
	a := &r24Store{inner: inner, lateBy: 3 * st, landed: make(chan string, 1)}
	a.lateBegins.Store(1)
	var runs atomic.Int32
	srvA := httptest.NewServer(idempotency.Middleware(a, idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(st))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		})))
	defer srvA.Close()
	first := r24Post(srvA.URL, "k")
	require.Equal(t, http.StatusServiceUnavailable, first.status)
	<-a.landed // 3 store timeouts after the Begin gave up: after round 1 (and 2)
	landed := time.Now()
	var statuses []int
	for time.Since(landed) < lease+500*time.Millisecond {
		r := r24Post(srvA.URL, "k") // the client's retries, on the same replica
		statuses = append(statuses, r.status)
		if r.status != http.StatusConflict {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("retries on the replica that left the claim, after it landed: %v over %v; releases asked of the store: %d",
		statuses, time.Since(landed).Round(time.Millisecond), a.releases.Load())
	assert.Equal(t, http.StatusCreated, statuses[0], "the replica's next Begin of the key should free the claim its Begin left, and run")
	time.Sleep(4 * st)
}

// Three replicas, 5 keys, 40 concurrent posts per key spread over them,
// while every replica's saves fail for 300 ms from the first handler's
// end (the answers go out behind a failed first try): each key runs once,
// and every 201 anyone gets is that run's answer.
func TestReview24ManyRepeatsWhileTheSaveIsRetriedBehindTheAnswer(t *testing.T) {
	const lease, st = 2 * time.Second, 100 * time.Millisecond
	inner := idempotency.NewMemoryStore(0)
	var failUntil atomic.Int64
	var runs sync.Map // key -> *atomic.Int32
	var urls []string
	for range 3 {
		s := &r24Store{inner: inner}
		mw := idempotency.Middleware(s, idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(st))
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := r.Header.Get(idempotency.Header)
			v, _ := runs.LoadOrStore(k, new(atomic.Int32))
			n := v.(*atomic.Int32).Add(1)
			time.Sleep(50 * time.Millisecond)
			failUntil.CompareAndSwap(0, time.Now().Add(300*time.Millisecond).UnixNano())
			s.failCompleteUntil.Store(failUntil.Load())
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "%s run %d", k, n)
		})))
		defer srv.Close()
		// every replica fails its saves in the same window
		go func() {
			for range 100 {
				if u := failUntil.Load(); u != 0 {
					s.failCompleteUntil.Store(u)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		urls = append(urls, srv.URL)
	}
	var mu sync.Mutex
	got := map[string]map[string]int{}
	var wg sync.WaitGroup
	for k := range 5 {
		key := fmt.Sprintf("key-%d", k)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i*25) * time.Millisecond)
				a := r24Post(urls[i%3], key)
				mu.Lock()
				defer mu.Unlock()
				if got[key] == nil {
					got[key] = map[string]int{}
				}
				got[key][fmt.Sprintf("%d %s", a.status, a.body)]++
			}()
		}
	}
	wg.Wait()
	runs.Range(func(k, v any) bool {
		assert.EqualValues(t, 1, v.(*atomic.Int32).Load(), "key %v ran more than once", k)
		return true
	})
	for key, answers := range got {
		var oks []string
		for a := range answers {
			if strings.HasPrefix(a, "201") {
				oks = append(oks, a)
			} else {
				assert.True(t, strings.HasPrefix(a, "409"), "unexpected answer %q", a)
			}
		}
		assert.Len(t, oks, 1, "%s: answers %v", key, answers)
	}
	t.Logf("answers: %v", got)
	time.Sleep(lease)
}
