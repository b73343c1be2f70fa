package httpclient_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review78Body: unknown-length body, random chunk sizes, counts Close calls,
// flags a Read after Close and concurrent Reads.
type review78Body struct {
	data    []byte
	off     int
	rnd     *mrand.Rand
	closes  atomic.Int32
	inRead  atomic.Int32
	bad     atomic.Value // string
	delay   time.Duration
	zeroes  int  // Read returns 0,nil this many times first
	dataErr bool // last chunk comes with io.EOF
	failAt  int  // >0: return an error once off reaches it
}

func (b *review78Body) Read(p []byte) (int, error) {
	if b.inRead.Add(1) != 1 {
		b.bad.Store("concurrent Read")
	}
	defer b.inRead.Add(-1)
	if b.closes.Load() > 0 {
		b.bad.Store("Read after Close")
	}
	if b.zeroes > 0 {
		b.zeroes--
		return 0, nil
	}
	if b.delay > 0 {
		time.Sleep(b.delay)
	}
	if b.failAt > 0 && b.off >= b.failAt {
		return 0, errors.New("review78: caller's reader failed")
	}
	if b.off >= len(b.data) {
		return 0, io.EOF
	}
	n := 1 + b.rnd.Intn(4096)
	if n > len(p) {
		n = len(p)
	}
	if n > len(b.data)-b.off {
		n = len(b.data) - b.off
	}
	if b.failAt > 0 && b.off+n > b.failAt {
		n = b.failAt - b.off
	}
	copy(p, b.data[b.off:b.off+n])
	b.off += n
	if b.dataErr && b.off == len(b.data) {
		return n, io.EOF
	}
	return n, nil
}

func (b *review78Body) Close() error { b.closes.Add(1); return nil }

func review78Sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// review78Server: per X-Id counts attempts. Modes (X-Mode), applied to the first attempt only:
// "503after": read whole body, answer 503; "cut": read X-Cut bytes then abort the connection;
// "503before": answer 503 without reading. Other attempts read the body and answer 200 with its sha256.
type review78Server struct {
	mu   sync.Mutex
	seen map[string]int
	sums map[string][]string
}

func newReview78Server() *review78Server {
	return &review78Server{seen: map[string]int{}, sums: map[string][]string{}}
}

func (s *review78Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Id")
	s.mu.Lock()
	s.seen[id]++
	n := s.seen[id]
	s.mu.Unlock()
	if n == 1 {
		switch r.Header.Get("X-Mode") {
		case "503after":
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			return
		case "503before":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			return
		case "cut":
			k, _ := strconv.Atoi(r.Header.Get("X-Cut"))
			io.CopyN(io.Discard, r.Body, int64(k))
			if hj, ok := w.(http.Hijacker); ok {
				c, _, err := hj.Hijack()
				if err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(400)
		return
	}
	sum := review78Sum(b)
	s.mu.Lock()
	s.sums[id] = append(s.sums[id], sum)
	s.mu.Unlock()
	w.Header().Set("X-Sum", sum)
	w.WriteHeader(200)
}

func review78Pipeline(opts ...pipeline.Option) *pipeline.Pipeline {
	return pipeline.New(append([]pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))}, opts...)...)
}

type review78Result struct {
	status   int
	sum      string
	err      error
	attempts int
}

func review78Run(t *testing.T, rt http.RoundTripper, srv *review78Server, url, id, mode string, cut int, body *review78Body, ctx context.Context) review78Result {
	req, _ := http.NewRequestWithContext(ctx, "PUT", url, body)
	req.ContentLength = -1
	req.Header.Set("X-Id", id)
	req.Header.Set("X-Mode", mode)
	req.Header.Set("X-Cut", strconv.Itoa(cut))
	resp, err := rt.RoundTrip(req)
	res := review78Result{err: err}
	if resp != nil {
		res.status = resp.StatusCode
		res.sum = resp.Header.Get("X-Sum")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	srv.mu.Lock()
	res.attempts = srv.seen[id]
	srv.mu.Unlock()
	return res
}

func review78WaitClosed(b *review78Body, d time.Duration) int32 {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if b.closes.Load() > 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	return b.closes.Load()
}

func review78Data(rnd *mrand.Rand, n int) []byte {
	b := make([]byte, n)
	rnd.Read(b)
	return b
}

// TestReview78_RetryByteExact: many concurrent PUTs with streamed bodies
// of unknown length, sizes around MaxBufferedBody, first attempt 503
// after reading, or cut after reading part: a retried body must reach the
// server byte for byte; the caller's body is closed exactly once; never
// read concurrently or after Close.
func TestReview78_RetryByteExact(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			s := newReview78Server()
			hs := httptest.NewUnstartedServer(s)
			var base http.RoundTripper
			if h2 {
				hs.EnableHTTP2 = true
				hs.StartTLS()
				base = hs.Client().Transport
			} else {
				hs.Start()
				base = &http.Transport{MaxIdleConnsPerHost: 100}
			}
			defer hs.Close()
			const max = 64 << 10
			rt := httpclient.NewTransport(httpclient.Base(base), httpclient.MaxBufferedBody(max), httpclient.WithPipeline(review78Pipeline()))
			var wg sync.WaitGroup
			var mu sync.Mutex
			stats := map[string]int{}
			for i := range 120 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := mrand.New(mrand.NewSource(int64(i)))
					sizes := []int{0, 1, max - 1, max, max + 1, 2 * max, rnd.Intn(max)}
					size := sizes[i%len(sizes)]
					modes := []string{"503after", "cut", "503before", "ok"}
					mode := modes[(i/len(sizes))%len(modes)]
					data := review78Data(rnd, size)
					body := &review78Body{data: data, rnd: rnd, dataErr: i%2 == 0, zeroes: i % 3}
					cut := size / 2
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					res := review78Run(t, rt, s, hs.URL, fmt.Sprint(i), mode, cut, body, ctx)
					closes := review78WaitClosed(body, 2*time.Second)
					if v := body.bad.Load(); v != nil {
						t.Errorf("#%d size %d mode %s: %v", i, size, mode, v)
					}
					if closes != 1 {
						t.Errorf("#%d size %d mode %s: caller's body closed %d times", i, size, mode, closes)
					}
					key := fmt.Sprintf("%s size=%d status=%d attempts=%d errNil=%v", mode, size, res.status, res.attempts, res.err == nil)
					if res.status == 200 && res.sum != review78Sum(data) {
						t.Errorf("#%d %s: body corrupted: sum %s want %s", i, key, res.sum, review78Sum(data))
					}
					// Within the buffer, a failed first attempt must be retried
					// and succeed; but a 503 answered before the body was read
					// leaves the base still sending it, and the Transport waits
					// DrainTimeout at most for it to be done (documented): on a
					// loaded machine under -race, HTTP/2's body writer took
					// longer once in CI, and the 503 came back as it was.
					late := mode == "503before" && res.status == 503 && res.attempts == 1
					if size <= max && mode != "ok" && res.status != 200 && !late {
						t.Errorf("#%d %s: not retried within MaxBufferedBody: err=%v", i, key, res.err)
					}
					mu.Lock()
					stats[key]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			for k, v := range stats {
				t.Logf("%3d %s", v, k)
			}
		})
	}
}

// TestReview78_HedgeStreaming: a slow streamed body with hedging at 5 ms:
// the hedge cannot get a reader; the call must complete as a plain client's
// does, the body byte-exact, closed once.
func TestReview78_HedgeStreaming(t *testing.T) {
	s := newReview78Server()
	hs := httptest.NewServer(s)
	defer hs.Close()
	base := &http.Transport{}
	p := review78Pipeline(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	rt := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := mrand.New(mrand.NewSource(int64(i)))
			data := review78Data(rnd, 20000)
			body := &review78Body{data: data, rnd: rnd, delay: 3 * time.Millisecond}
			mode := []string{"ok", "503after", "503before"}[i%3]
			res := review78Run(t, rt, s, hs.URL, "h"+fmt.Sprint(i), mode, 0, body, context.Background())
			closes := review78WaitClosed(body, 3*time.Second)
			if mode != "503before" && (res.status != 200 || res.sum != review78Sum(data)) {
				t.Errorf("#%d %s: status %d err %v attempts %d sum ok %v", i, mode, res.status, res.err, res.attempts, res.sum == review78Sum(data))
			}
			if mode == "503before" {
				t.Logf("#%d 503before: status %d attempts %d err %v", i, res.status, res.attempts, res.err)
			}
			if closes != 1 {
				t.Errorf("#%d: closed %d times", i, closes)
			}
			if v := body.bad.Load(); v != nil {
				t.Errorf("#%d: %v", i, v)
			}
		}()
	}
	wg.Wait()
}

// TestReview78_CallerBodyErrorNoBreaker: a body whose reader fails (after
// some bytes, with and without data) must not open a 1-failure breaker,
// and is not retried.
func TestReview78_CallerBodyErrorNoBreaker(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			s := newReview78Server()
			hs := httptest.NewUnstartedServer(s)
			var base http.RoundTripper
			if h2 {
				hs.EnableHTTP2 = true
				hs.StartTLS()
				base = hs.Client().Transport
			} else {
				hs.Start()
				base = &http.Transport{}
			}
			defer hs.Close()
			rt := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(review78Pipeline()),
				httpclient.BreakerPerHost(func(string) *breaker.Breaker {
					return breaker.New("h", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
				}))
			for i, failAt := range []int{1, 100, 5000, 70000} {
				rnd := mrand.New(mrand.NewSource(int64(i)))
				body := &review78Body{data: review78Data(rnd, 100000), rnd: rnd, failAt: failAt}
				res := review78Run(t, rt, s, hs.URL, "e"+fmt.Sprint(i), "ok", 0, body, context.Background())
				if res.err == nil {
					t.Errorf("failAt %d: no error, status %d", failAt, res.status)
				}
				t.Logf("failAt %d: attempts %d err %v", failAt, res.attempts, res.err)
				if res.attempts > 1 {
					t.Errorf("failAt %d: caller's body error retried: %d attempts", failAt, res.attempts)
				}
				if c := review78WaitClosed(body, time.Second); c != 1 {
					t.Errorf("failAt %d: closed %d", failAt, c)
				}
				// the breaker must still be closed
				ok := &review78Body{data: []byte("x"), rnd: rnd}
				res = review78Run(t, rt, s, hs.URL, "ok"+fmt.Sprint(i), "ok", 0, ok, context.Background())
				if res.status != 200 {
					t.Fatalf("after failAt %d: healthy call failed: %v (breaker opened by caller's body?)", failAt, res.err)
				}
			}
		})
	}
}
