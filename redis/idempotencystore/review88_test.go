package idempotencystore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

type r88Rig struct {
	runs sync.Map // key -> *atomic.Int32
	srvs []*httptest.Server
	cls  []*redis.Client
}

func (rg *r88Rig) count(k string) int32 {
	v, _ := rg.runs.LoadOrStore(k, new(atomic.Int32))
	return v.(*atomic.Int32).Load()
}

func r88New(t *testing.T, addr string, replicas int, sleep time.Duration, opts ...idempotency.Option) *r88Rig {
	rg := &r88Rig{}
	for range replicas {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		rg.cls = append(rg.cls, c)
		st := idempotencystore.New(c, "r88:")
		mw := idempotency.Middleware(st, append([]idempotency.Option{idempotency.SharedKeys()}, opts...)...)
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := r.Header.Get("Idempotency-Key")
			v, _ := rg.runs.LoadOrStore(k, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			time.Sleep(sleep)
			w.Header().Set("X-Run", rand.Text())
			w.WriteHeader(201)
			fmt.Fprintf(w, "body-%s-%s", k, rand.Text())
		}))
		s := httptest.NewServer(h)
		rg.srvs = append(rg.srvs, s)
	}
	t.Cleanup(func() {
		for _, s := range rg.srvs {
			s.Close()
		}
		for _, c := range rg.cls {
			_ = c.Close()
		}
	})
	return rg
}

type r88Resp struct {
	status int
	body   string
	run    string
	rep    string
	took   time.Duration
	err    error
}

func r88Do(url, key string) r88Resp {
	req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	cl := &http.Client{Timeout: 20 * time.Second}
	res, err := cl.Do(req)
	if err != nil {
		return r88Resp{err: err, took: time.Since(start)}
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return r88Resp{status: res.StatusCode, body: string(b), run: res.Header.Get("X-Run"), rep: res.Header.Get(idempotency.ReplayedHeader), took: time.Since(start)}
}

// Many concurrent duplicates over two replicas: one run per key, every 201
// byte-identical. A 503 is allowed: under the race detector on 2 cores a
// claim can take longer than StoreTimeout, and the duplicates waiting on
// it in its replica get 503 too (Guard.Begin's doc).
func TestReview88_ConcurrentDuplicatesTwoReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rg := r88New(t, srv.Addr(), 2, 100*time.Millisecond)
	const keys, dups = 20, 30
	var wg sync.WaitGroup
	res := make([][]r88Resp, keys)
	for k := range keys {
		res[k] = make([]r88Resp, dups)
		for d := range dups {
			wg.Go(func() { res[k][d] = r88Do(rg.srvs[d%2].URL, fmt.Sprintf("k%d", k)) })
		}
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		if n := rg.count(key); n > 1 {
			t.Errorf("%s ran %d times", key, n)
		}
		var first string
		for _, r := range res[k] {
			if r.err != nil || (r.status != 201 && r.status != 409 && r.status != 503) {
				t.Errorf("%s: %v %d %s", key, r.err, r.status, r.body)
			}
			if r.status == 201 {
				if first == "" {
					first = r.body + r.run
				} else if first != r.body+r.run {
					t.Errorf("%s: two different 201s", key)
				}
			}
		}
		// Repeats after: byte-exact replays; if every duplicate got 503
		// (under the race detector), the first repeat runs it.
		for i := range 4 {
			r := r88Do(rg.srvs[i%2].URL, key)
			ranNow := first == "" && r.status == 201 && r.rep == ""
			if !ranNow && (r.status != 201 || r.rep != "true" || (first != "" && r.body+r.run != first)) {
				t.Errorf("%s replay %d: %d %q rep=%q", key, i, r.status, r.body, r.rep)
			}
			if first == "" && r.status == 201 {
				first = r.body + r.run
			}
		}
		if n := rg.count(key); n != 1 {
			t.Errorf("%s ran %d times in all", key, n)
		}
	}
}

// A handler 4 leases long: repeats on the other replica get 409 throughout,
// one run, then a byte-exact replay.
func TestReview88_SlowerThanLease(t *testing.T) {
	srv := redistest.Start(t)
	rg := r88New(t, srv.Addr(), 2, 3*time.Second, idempotency.Lease(750*time.Millisecond), idempotency.StoreTimeout(200*time.Millisecond))
	done := make(chan r88Resp)
	go func() { done <- r88Do(rg.srvs[0].URL, "slow") }()
	time.Sleep(50 * time.Millisecond)
	codes := map[int]int{}
loop:
	for {
		select {
		case first := <-done:
			if first.status != 201 {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			r := r88Do(rg.srvs[1].URL, "slow")
			if r.body != first.body || r.run != first.run {
				t.Errorf("replay differs: %q vs %q", r.body, first.body)
			}
			break loop
		default:
		}
		r := r88Do(rg.srvs[1].URL, "slow")
		codes[r.status]++
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("repeats: %v", codes)
	if n := rg.count("slow"); n != 1 {
		t.Errorf("ran %d times", n)
	}
	if codes[201] > 0 && rg.count("slow") > 1 {
		t.Errorf("repeat ran")
	}
}

// Redis frozen: new keyed requests answered within a bound (503 first,
// then, after FailOpenAfter, run locally); a request running as it froze
// answers; after thaw, no leak of goroutines once all is done.
func TestReview88_FrozenFailsOpenInBoundedTime(t *testing.T) {
	base := runtime.NumGoroutine()
	srv := redistest.Start(t)
	func() {
		rg := r88New(t, srv.Addr(), 1, 300*time.Millisecond, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(200*time.Millisecond), idempotency.FailOpenAfter(time.Second))
		u := rg.srvs[0].URL
		if r := r88Do(u, "warm"); r.status != 201 {
			t.Fatalf("warm %d", r.status)
		}
		inflight := make(chan r88Resp)
		go func() { inflight <- r88Do(u, "inflight") }()
		time.Sleep(100 * time.Millisecond)
		srv.Freeze()
		frozeAt := time.Now()
		var maxTook time.Duration
		codes := map[int]int{}
		var firstOK time.Duration
		for i := 0; time.Since(frozeAt) < 4*time.Second; i++ {
			r := r88Do(u, fmt.Sprintf("f%d", i))
			if r.err != nil {
				t.Errorf("f%d: %v", i, r.err)
				continue
			}
			codes[r.status]++
			maxTook = max(maxTook, r.took)
			if r.status == 201 && firstOK == 0 {
				firstOK = time.Since(frozeAt)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r := <-inflight
		t.Logf("inflight: %d after %v; new: %v, slowest %v, first 201 %v after freeze", r.status, r.took, codes, maxTook, firstOK)
		if r.status != 201 {
			t.Errorf("request in flight as it froze: %d %s", r.status, r.body)
		}
		if maxTook > 1500*time.Millisecond {
			t.Errorf("a request took %v while frozen", maxTook)
		}
		if firstOK == 0 || firstOK > 1*time.Second+5*time.Second+time.Second {
			t.Errorf("never failed open (first 201 after %v)", firstOK)
		}
		srv.Thaw()
		time.Sleep(2 * time.Second)
		for i := range 5 {
			if r := r88Do(u, fmt.Sprintf("after%d", i)); r.status != 201 {
				t.Errorf("after thaw: %d %s", r.status, r.body)
			}
			time.Sleep(400 * time.Millisecond)
		}
		for _, s := range rg.srvs {
			s.Close()
		}
		for _, c := range rg.cls {
			c.Close()
		}
	}()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(8 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines %d, base %d\n%s", n, base, trimStacks(buf))
	}
}

func trimStacks(b []byte) string {
	var out []string
	for _, g := range bytes.Split(b, []byte("\n\n")) {
		if bytes.Contains(g, []byte("testing.")) && !bytes.Contains(g, []byte("resiliencekit")) {
			continue
		}
		out = append(out, string(g))
	}
	return strings.Join(out, "\n\n")
}

// Redis killed (SIGKILL) and restarted empty while requests flow: no
// request fails for longer than the documented bound, and none hangs.
func TestReview88_KilledAndRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	rg := r88New(t, srv.Addr(), 2, 200*time.Millisecond, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(200*time.Millisecond), idempotency.FailOpenAfter(time.Second))
	inflight := make(chan r88Resp)
	go func() { inflight <- r88Do(rg.srvs[0].URL, "inflight") }()
	time.Sleep(50 * time.Millisecond)
	srv.Kill()
	killed := time.Now()
	codes := map[int]int{}
	var maxTook time.Duration
	restarted := false
	for i := 0; time.Since(killed) < 5*time.Second; i++ {
		if !restarted && time.Since(killed) > 2*time.Second {
			srv.Restart()
			restarted = true
		}
		r := r88Do(rg.srvs[i%2].URL, fmt.Sprintf("kk%d", i))
		if r.err != nil {
			t.Errorf("%v", r.err)
			continue
		}
		codes[r.status]++
		maxTook = max(maxTook, r.took)
		time.Sleep(30 * time.Millisecond)
	}
	r := <-inflight
	t.Logf("inflight %d after %v; new %v slowest %v", r.status, r.took, codes, maxTook)
	if r.status != 201 {
		t.Errorf("in flight: %d %s", r.status, r.body)
	}
	if maxTook > 1500*time.Millisecond {
		t.Errorf("slowest %v", maxTook)
	}
	// After restart, repeat of inflight on replica 0 replays (its save went local or to the restarted store).
	r2 := r88Do(rg.srvs[0].URL, "inflight")
	t.Logf("repeat of inflight on replica 0: %d rep=%s same=%v; runs=%d", r2.status, r2.rep, r2.body == r.body, rg.count("inflight"))
}

// A link whose round trip is a quarter of StoreTimeout (New's doc: four
// round trips at least), through the middleware on two replicas: after
// the first claim, which pays for new connections, every claim is shared
// (in Redis), no key runs twice across the replicas, and none gets 503.
// Before the store made its connections and read its policy with time of
// its own, each call that ran out of time dropped its connection, the
// next paid the handshake again, and the guard never used Redis.
func TestReview88_SlowLinkStaysShared(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	p.Delay(50 * time.Millisecond) // round trip 100 ms
	rg := r88New(t, p.Addr(), 2, 10*time.Millisecond, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(400*time.Millisecond), idempotency.FailOpenAfter(time.Second))
	codes := map[int]int{}
	twice, keys := 0, 0
	for start := time.Now(); time.Since(start) < 5*time.Second; keys++ {
		k := fmt.Sprintf("sp%d", keys)
		a := r88Do(rg.srvs[0].URL, k)
		b := r88Do(rg.srvs[1].URL, k)
		if keys > 0 { // the first pays for new connections
			codes[a.status]++
			codes[b.status]++
		}
		if rg.count(k) > 1 {
			twice++
		}
	}
	stored, err := srv.Client().Keys(t.Context(), "r88:*").Result()
	require.NoError(t, err)
	t.Logf("%d keys: statuses after the first %v, run twice %d, in Redis %d", keys, codes, twice, len(stored))
	assert.Zero(t, twice, "keys run twice across replicas")
	assert.Zero(t, codes[503], "503s after the first key")
	assert.GreaterOrEqual(t, len(stored), keys-1, "claims shared in Redis")
}

// The store alone through a slow link, StoreTimeout four round trips:
// after the first Begin, no claim of a new key (one round trip) nor of a
// repeat (two) fails, a call that times out now and then included.
func TestReview88_StoreBeginWithinFourRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	for _, oneWay := range []time.Duration{40 * time.Millisecond, 60 * time.Millisecond} {
		t.Run(oneWay.String(), func(t *testing.T) {
			p := redistest.NewProxy(t, srv.Addr())
			p.Delay(oneWay)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			defer c.Close()
			st := idempotencystore.New(c, "r88s"+oneWay.String()+":")
			bound := 8 * oneWay // four round trips
			begin := func(key, token string) error {
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				_, err := st.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: token}, 3*time.Second)
				return err
			}
			_ = begin("first", "t") // pays for the connection
			time.Sleep(4 * oneWay)  // the connection made in the background, if the first ran out of time
			failed := 0
			for i := range 8 {
				for pass := range 2 {
					if err := begin(fmt.Sprintf("k%d", i), fmt.Sprint("t", pass)); err != nil {
						failed++
						t.Logf("key %d pass %d: %v", i, pass, err)
					}
				}
			}
			assert.Zero(t, failed, "Begins failed through a link of %v one way, bound %v", oneWay, bound)
		})
	}
}
