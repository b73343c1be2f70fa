package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func review84Client(base http.RoundTripper, p *pipeline.Pipeline) *http.Client {
	if p == nil {
		p = pipeline.New()
	}
	return &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))}
}

// A chain of n hops, each behind Middleware, each forwarding with the
// toolkit's client: the last hop's deadline must be at most ~n ms after the
// first caller's.
func TestReview84_ChainDeadline(t *testing.T) {
	const n = 8
	var lastDL atomic.Int64
	srvs := make([]*httptest.Server, n)
	urls := make([]string, n)
	for i := n - 1; i >= 0; i-- {
		i := i
		var next string
		if i < n-1 {
			next = urls[i+1]
		}
		c := review84Client(http.DefaultTransport, nil)
		srvs[i] = httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if next == "" {
				dl, _ := r.Context().Deadline()
				lastDL.Store(dl.UnixNano())
				return
			}
			time.Sleep(300 * time.Microsecond)
			req, _ := http.NewRequestWithContext(r.Context(), "GET", next, nil)
			resp, err := c.Do(req)
			if err != nil {
				w.WriteHeader(502)
				return
			}
			io.Copy(w, resp.Body)
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
		})))
		urls[i] = srvs[i].URL
		defer srvs[i].Close()
	}
	c := review84Client(http.DefaultTransport, nil)
	worst := time.Duration(-1 << 62)
	for k := 0; k < 50; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+time.Duration(k)*137*time.Microsecond)
		first, _ := ctx.Deadline()
		req, _ := http.NewRequestWithContext(ctx, "GET", urls[0], nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		over := time.Unix(0, lastDL.Load()).Sub(first)
		if k < 3 || over > time.Duration(n)*time.Millisecond {
			t.Logf("round %d: last hop past caller by %v", k, over)
		}
		if k > 0 {
			worst = max(worst, over)
		}
	}
	// Documented: up to n ms, plus the requests' time in transit, which
	// the race detector on a loaded machine stretches (3 to 14 ms seen).
	t.Logf("worst (warm connections) last-hop deadline past first caller's: %v (documented up to %d ms plus transit)", worst, n-1)
	if worst > 50*time.Millisecond {
		t.Errorf("chain of %d hops outlives caller by %v", n, worst)
	}
}

// The budget is computed before the base transport's connection queue:
// a request that waits for a connection sends the budget it had before the
// wait, and the hop outlives the caller by the wait.
func TestReview84_QueuedConnOutlivesCaller(t *testing.T) {
	var gotLeft atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hog" {
			<-release
			return
		}
		dl, ok := r.Context().Deadline()
		if ok {
			gotLeft.Store(int64(time.Until(dl)))
		}
	})))
	defer srv.Close()
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	c := review84Client(base, nil)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/hog", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	time.AfterFunc(400*time.Millisecond, func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	callerDL, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/x", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hopDL := time.Now().Add(time.Duration(gotLeft.Load())) // approx: measured at handler
	over := hopDL.Sub(callerDL)
	t.Logf("hop's deadline is %v after the caller's (documented: up to 1 ms)", over)
	if over > 20*time.Millisecond {
		t.Errorf("hop outlives caller by %v: budget computed before the connection wait", over)
	}
}

// Do-no-harm: a server behind Middleware over real HTTP. Its handler honours ctx.
// Healthy callers with various budgets must not be failed by the toolkit.
func TestReview84_DoNoHarmRealServer(t *testing.T) {
	var fails atomic.Int64
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Millisecond):
		case <-r.Context().Done():
			fails.Add(1)
			w.WriteHeader(504)
			return
		}
		w.Write([]byte("ok"))
	})))
	defer srv.Close()
	c := review84Client(http.DefaultTransport, pipeline.New())
	var wg sync.WaitGroup
	var clientFail atomic.Int64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				resp, err := c.Do(req)
				if err != nil || resp.StatusCode != 200 {
					clientFail.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if fails.Load() > 0 || clientFail.Load() > 0 {
		t.Errorf("handler ctx ended %d, client failures %d", fails.Load(), clientFail.Load())
	}
}

// No goroutines leaked per request across a hop.
func TestReview84_HopNoLeak(t *testing.T) {
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	})))
	defer srv.Close()
	c := review84Client(http.DefaultTransport, pipeline.New(pipeline.WithTimeBudget(time.Second)))
	do := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := 0; i < 20; i++ {
		do()
	}
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()
	for i := 0; i < 2000; i++ {
		do()
	}
	time.Sleep(100 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > base+5 {
		t.Errorf("goroutines %d -> %d", base, n)
	}
}

// Breaker behind a hop: a dependency that hangs, called by a hop whose
// callers send budgets. Short budgets (50 ms) must not open it; budgets
// with time enough (400 ms) must.
func TestReview84_BreakerShortVsLong(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer dep.Close()
	for _, budget := range []time.Duration{50 * time.Millisecond, 400 * time.Millisecond} {
		b := breaker.New(fmt.Sprint("dep", budget), breaker.ConsecutiveFailures(3))
		dc := review84Client(http.DefaultTransport, pipeline.New(pipeline.WithBreaker(b)))
		hop := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", dep.URL, nil)
			resp, err := dc.Do(req)
			if err != nil {
				w.WriteHeader(502)
				return
			}
			resp.Body.Close()
		})))
		c := review84Client(http.DefaultTransport, pipeline.New())
		for i := 0; i < 6; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			req, _ := http.NewRequestWithContext(ctx, "GET", hop.URL, nil)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			cancel()
			time.Sleep(20 * time.Millisecond)
		}
		st := b.State()
		t.Logf("budget %v: breaker %v counts %+v", budget, st, b.Counts())
		if budget < 100*time.Millisecond && st != resilience.StateClosed {
			t.Errorf("short budget opened the breaker")
		}
		if budget >= 100*time.Millisecond && st == resilience.StateClosed {
			t.Errorf("hanging dependency with %v budgets did not open the breaker", budget)
		}
		hop.Close()
	}
}

// Sequential rounds: a hog holds the only connection to the hop for 200 ms,
// then a caller with 400 ms (time enough, > 100 ms) calls the hop, whose
// dependency hangs. Five such calls should open ConsecutiveFailures(3).
func TestReview84_BreakerQueuedSequential(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer dep.Close()
	b := breaker.New("depqs", breaker.ConsecutiveFailures(3))
	dc := review84Client(http.DefaultTransport, pipeline.New(pipeline.WithBreaker(b)))
	hop := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hog" {
			time.Sleep(200 * time.Millisecond)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), "GET", dep.URL, nil)
		resp, err := dc.Do(req)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		resp.Body.Close()
	})))
	defer hop.Close()
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	c := review84Client(base, pipeline.New())
	for i := 0; i < 5; i++ {
		hogDone := make(chan struct{})
		go func() {
			defer close(hogDone)
			resp, err := c.Get(hop.URL + "/hog")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", hop.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		<-hogDone
		time.Sleep(30 * time.Millisecond)
	}
	t.Logf("breaker %v counts %+v", b.State(), b.Counts())
	if b.State() == resilience.StateClosed {
		t.Errorf("a hanging dependency, called with 400 ms budgets (queued 180 ms upstream), never opened the breaker: %+v", b.Counts())
	}
}

// Control for the above: same, without the hog (no queue).
func TestReview84_BreakerUnqueuedSequential(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer dep.Close()
	b := breaker.New("depus", breaker.ConsecutiveFailures(3))
	dc := review84Client(http.DefaultTransport, pipeline.New(pipeline.WithBreaker(b)))
	hop := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", dep.URL, nil)
		resp, err := dc.Do(req)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		resp.Body.Close()
	})))
	defer hop.Close()
	c := review84Client(http.DefaultTransport, pipeline.New())
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 220*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", hop.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		time.Sleep(30 * time.Millisecond)
	}
	t.Logf("breaker %v counts %+v", b.State(), b.Counts())
	if b.State() == resilience.StateClosed {
		t.Errorf("did not open: %+v", b.Counts())
	}
}

// A new connection's dial (TCP/TLS handshake over a long path, here 100 ms)
// happens after the budget is computed: the hop gets the dial time on top.
func TestReview84_SlowDialOutlivesCaller(t *testing.T) {
	var gotLeft atomic.Int64
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dl, _ := r.Context().Deadline()
		gotLeft.Store(int64(time.Until(dl)))
	})))
	defer srv.Close()
	d := &net.Dialer{}
	base := &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
		time.Sleep(100 * time.Millisecond)
		return d.DialContext(ctx, n, a)
	}}
	defer base.CloseIdleConnections()
	c := review84Client(base, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	callerDL, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	over := time.Now().Add(time.Duration(gotLeft.Load())).Sub(callerDL)
	t.Logf("hop's deadline %v after the caller's", over)
	if over > 20*time.Millisecond {
		t.Errorf("hop outlives caller by %v (dial time)", over)
	}
}
