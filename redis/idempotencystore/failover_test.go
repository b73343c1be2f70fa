package idempotencystore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The failover tests: a master and a replica of the test's own, the
// service's clients connected to one address (a redistest.Switch) that the
// test moves from the master to the replica, as Sentinel or a managed
// Redis would behind one endpoint. Lease 3 s, renewed every second; the
// handler takes 2 s.
const (
	failoverLease   = 3 * time.Second
	failoverHandler = 2 * time.Second
	failoverKeys    = "failover:*" // the store's keys (the middleware scopes the client's key)
)

// events counts what one service instance reports.
type events struct{ leaseLost, notStored, storeFailed atomic.Int64 }

func (e *events) OnEvent(ev resilience.Event) {
	switch ev.Kind {
	case resilience.EventLeaseLost:
		e.leaseLost.Add(1)
	case resilience.EventNotStored:
		e.notStored.Add(1)
	case resilience.EventStoreFailed:
		e.storeFailed.Add(1)
	}
}

// failoverInstance is one service instance: a middleware with a store and
// a client of its own on addr, in front of a handler that takes
// failoverHandler and answers its run's number.
func failoverInstance(t *testing.T, addr string, runs *atomic.Int64, ev *events) *httptest.Server {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	store := idempotencystore.New(client, "failover:")
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(failoverLease),
		idempotency.WithListener(resilience.ListenerFunc(ev.OnEvent)),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(failoverHandler)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

type answer struct {
	code         int
	replay, body string
}

func postAsync(t *testing.T, url string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { code, replay, body := post(t, url, "k"); ch <- answer{code, replay, body} }()
	return ch
}

// claimed reports whether srv has one of the store's keys.
func claimed(t *testing.T, srv *redistest.Server) bool {
	keys, err := srv.Client().Keys(context.Background(), failoverKeys).Result()
	require.NoError(t, err)
	return len(keys) == 1
}

// failover kills the master (SIGKILL), promotes the replica and moves the
// switch to it: the failover as the service sees it.
func failover(master, replica *redistest.Server, sw *redistest.Switch) {
	master.Kill()
	replica.Promote()
	sw.Retarget(replica.Addr())
}

// TestRedisFailoverAfterTheClaimReplicated: a request holds its key; once
// the claim is on the replica, the master is killed and the replica
// promoted. A repeat on another instance meanwhile gets 409 (the new
// master has the claim), the holder's save goes to the new master, and a
// retry on the other instance gets the replay: one run.
func TestRedisFailoverAfterTheClaimReplicated(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master.Addr())
	sw := redistest.NewSwitch(t, master.Addr())
	var runs atomic.Int64
	var evA, evB events
	a := failoverInstance(t, sw.Addr(), &runs, &evA)
	b := failoverInstance(t, sw.Addr(), &runs, &evB)

	start := time.Now()
	first := postAsync(t, a.URL)
	require.Eventually(t, func() bool { return claimed(t, master) }, time.Second, 10*time.Millisecond, "claimed")
	claimedAt := time.Since(start)
	offset := master.ReplOffset()
	// Within the 2 s handler, with room for the failover after: a loaded
	// machine (the CI runs the breaker store's process tests beside it)
	// has taken over a second to apply one write.
	require.Eventually(t, func() bool { return replica.ReplOffset() >= offset }, 1500*time.Millisecond, 10*time.Millisecond, "replicated")
	replicatedAt := time.Since(start)
	require.True(t, claimed(t, replica), "the claim is on the replica")
	failover(master, replica, sw)
	failedOver := time.Since(start)

	repeat := postAsync(t, b.URL)
	got := <-first
	rep := <-repeat
	t.Logf("claimed %v, replicated (offset %d) %v, failed over %v after the request began; repeat meanwhile %d; answered %d %s after %v",
		claimedAt.Round(time.Millisecond), offset, replicatedAt.Round(time.Millisecond), failedOver.Round(time.Millisecond),
		rep.code, got.code, got.body, time.Since(start).Round(time.Millisecond))
	require.Less(t, failedOver, failoverHandler, "failed over while the handler ran")
	assert.Equal(t, http.StatusConflict, rep.code, "the new master has the claim")
	assert.Equal(t, http.StatusCreated, got.code)
	assert.JSONEq(t, `{"order":1}`, got.body)
	for _, url := range []string{b.URL, a.URL} {
		code, replay, body := post(t, url, "k")
		assert.Equal(t, http.StatusCreated, code)
		assert.Equal(t, "true", replay)
		assert.JSONEq(t, `{"order":1}`, body)
	}
	assert.EqualValues(t, 1, runs.Load(), "one run")
	assert.Zero(t, evA.leaseLost.Load()+evA.notStored.Load(), "the holder kept its lease and stored its result")
}

// TestRedisFailoverBeforeTheClaimReplicated: the replication link is cut
// (a redistest.Proxy between replica and master) before the request
// claims its key, so the claim is on the master only; the master is
// killed and the replica promoted. The new master has no claim: the key
// is free until the holder's next renewal (at most L/3 later), which
// takes it again. (The link is cut rather than the replica stopped with
// SIGSTOP: a stopped replica's kernel still takes the master's bytes into
// its socket buffer, and it applies them when resumed, even after the
// master died.)
//
//   - a retry in that window, on another instance, takes the key and runs
//     the request a second time; the holder's renewal then finds the key
//     taken: its lease is lost (its context canceled) and its save fails
//     on the fence (EventLeaseLost, EventNotStored), so the record is the
//     retry's and every later retry replays it: two runs, and the first
//     client got the first run's answer, every later one the second's.
//   - no retry in that window: the holder's renewal takes the key again
//     and its result is stored: one run.
func TestRedisFailoverBeforeTheClaimReplicated(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryFirst bool
	}{
		{"a retry comes first", true},
		{"the holder renews first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			master := redistest.Start(t)
			link := redistest.NewProxy(t, master.Addr())
			replica := redistest.StartReplica(t, link.Addr())
			sw := redistest.NewSwitch(t, master.Addr())
			var runs atomic.Int64
			var evA, evB events
			a := failoverInstance(t, sw.Addr(), &runs, &evA)
			b := failoverInstance(t, sw.Addr(), &runs, &evB)

			link.Cut() // replication paused: what the master writes from now on does not reach the replica
			start := time.Now()
			first := postAsync(t, a.URL)
			require.Eventually(t, func() bool { return claimed(t, master) }, time.Second, 10*time.Millisecond, "claimed")
			time.Sleep(100 * time.Millisecond) // time it would have had to replicate
			mOff, rOff := master.ReplOffset(), replica.ReplOffset()
			require.False(t, claimed(t, replica), "the claim is not on the replica")
			failover(master, replica, sw)
			failedOver := time.Since(start)
			require.Less(t, failedOver, failoverLease/3, "failed over before the holder's first renewal")

			if !tc.retryFirst {
				got := <-first
				t.Logf("failed over %v after the request began (master offset %d, replica %d); answered %d %s after %v",
					failedOver.Round(time.Millisecond), mOff, rOff, got.code, got.body, time.Since(start).Round(time.Millisecond))
				assert.Equal(t, http.StatusCreated, got.code)
				assert.JSONEq(t, `{"order":1}`, got.body)
				for _, url := range []string{b.URL, a.URL} {
					code, replay, body := post(t, url, "k")
					assert.Equal(t, http.StatusCreated, code)
					assert.Equal(t, "true", replay)
					assert.JSONEq(t, `{"order":1}`, body)
				}
				assert.EqualValues(t, 1, runs.Load(), "one run: the holder took the key again at its renewal")
				assert.Zero(t, evA.leaseLost.Load()+evA.notStored.Load())
				return
			}

			retry := postAsync(t, b.URL)
			got, ret := <-first, <-retry
			t.Logf("failed over %v after the request began (master offset %d, replica %d); first answered %d %s, the retry %d %s, after %v; holder: %d lease lost, %d not stored",
				failedOver.Round(time.Millisecond), mOff, rOff, got.code, got.body, ret.code, ret.body, time.Since(start).Round(time.Millisecond),
				evA.leaseLost.Load(), evA.notStored.Load())
			assert.Greater(t, mOff, rOff, "the master had written what the replica had not")
			assert.Equal(t, http.StatusCreated, got.code, "the holder's client still gets its own run's answer")
			assert.JSONEq(t, `{"order":1}`, got.body)
			assert.Equal(t, http.StatusCreated, ret.code)
			assert.Empty(t, ret.replay)
			assert.JSONEq(t, `{"order":2}`, ret.body, "the retry ran the request again")
			assert.EqualValues(t, 2, runs.Load(), "two runs: the failover lost the claim")
			assert.EqualValues(t, 1, evA.leaseLost.Load(), "the holder's renewal found the key taken")
			assert.EqualValues(t, 1, evA.notStored.Load(), "the holder's save failed on the fence")
			assert.Zero(t, evB.leaseLost.Load()+evB.notStored.Load())
			for _, url := range []string{a.URL, b.URL} {
				code, replay, body := post(t, url, "k")
				assert.Equal(t, http.StatusCreated, code)
				assert.Equal(t, "true", replay)
				assert.JSONEq(t, `{"order":2}`, body, "the record is the retry's: the holder overwrote nothing")
			}
		})
	}
}
