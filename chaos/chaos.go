// Package chaos is a fake HTTP dependency for tests and demos whose faults
// can be switched while traffic runs: down (503), a random error rate,
// added latency, hanging until the caller gives up, reset connections, a
// capacity beyond which it answers 503 as an overloaded service does (with
// a slow ramp back after an outage), and processing a request but dropping
// its response. It counts the requests it receives per bucket of time, so a
// test can read the load the dependency saw.
//
// A [Backend] is an [http.Handler] to serve over a real listener, and
// offers an in-memory [Backend.Transport] that calls it without a network,
// which lets tests run in the fake time of testing/synctest.
package chaos

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"time"
)

// Bucket is the traffic of one bucket of time.
type Bucket struct {
	// Start is when the bucket began.
	Start time.Time
	// Requests counts the requests received; OK those let through to the
	// handler (not refused by a fault: down, the error rate, the capacity,
	// a reset), as they arrive: the handler's own error status counts, as
	// do a request whose caller leaves during the latency and one whose
	// response is dropped (SetDropResponse). The capacity counts them.
	Requests, OK int
}

// Backend is a fake dependency. Its methods are safe for concurrent use,
// also while it serves.
type Backend struct {
	bucket  time.Duration
	handler http.Handler

	mu        sync.Mutex
	start     time.Time
	buckets   []Bucket
	received  int64
	processed int64

	down       bool
	errorRate  float64
	latency    time.Duration
	jitter     time.Duration
	hang       bool
	reset      bool
	drop       bool
	capacity   int // requests per bucket; 0 = unlimited
	rampStart  time.Time
	rampLength time.Duration
}

// New returns a healthy Backend counting requests in buckets of bucket
// (100 ms if <= 0) from now; made outside a testing/synctest bubble and
// first called in one (whose clock starts earlier), from its first request. A healthy request is served by handler, or
// answered 200 with {"ok":true} if handler is nil.
func New(bucket time.Duration, handler http.Handler) *Backend {
	if bucket <= 0 {
		bucket = 100 * time.Millisecond
	}
	if handler == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		})
	}
	return &Backend{bucket: bucket, handler: handler, start: time.Now()}
}

// SetHealthy clears every fault.
func (b *Backend) SetHealthy() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down, b.errorRate, b.latency, b.jitter = false, 0, 0, 0
	b.hang, b.reset, b.drop, b.capacity, b.rampLength = false, false, false, 0, 0
}

// SetDown makes every request get 503 (true) or ends that (false).
func (b *Backend) SetDown(down bool) { b.set(func() { b.down = down }) }

// SetErrorRate makes each request get 503 with probability p.
//
// It panics unless 0 <= p <= 1.
func (b *Backend) SetErrorRate(p float64) {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("chaos: SetErrorRate(%v): p must be from 0 to 1", p))
	}
	b.set(func() { b.errorRate = p })
}

// SetLatency delays each answer by fixed plus a random share of jitter.
// It panics if either is negative.
func (b *Backend) SetLatency(fixed, jitter time.Duration) {
	if fixed < 0 || jitter < 0 {
		panic(fmt.Sprintf("chaos: SetLatency(%v, %v): durations must be 0 or more", fixed, jitter))
	}
	b.set(func() { b.latency, b.jitter = fixed, jitter })
}

// SetHang makes requests hang until the caller gives up.
func (b *Backend) SetHang(hang bool) { b.set(func() { b.hang = hang }) }

// SetReset makes each connection be reset instead of answered.
func (b *Backend) SetReset(reset bool) { b.set(func() { b.reset = reset }) }

// SetDropResponse makes the backend process each request (the handler
// runs) and then drop the connection instead of answering.
func (b *Backend) SetDropResponse(drop bool) { b.set(func() { b.drop = drop }) }

// SetCapacity makes the backend answer at most n requests per bucket; the
// rest get 503, as an overloaded service's would. n <= 0 means unlimited.
// It ends a ramp that Recover began.
func (b *Backend) SetCapacity(n int) { b.set(func() { b.capacity, b.rampLength = max(n, 0), 0 }) }

// Recover ends an outage the way a real service often does: it stops being
// down, but its capacity per bucket ramps from a tenth of n to n over ramp,
// so a storm of retries keeps it overloaded. n <= 0 means unlimited, as
// for SetCapacity: there is then no ramp.
func (b *Backend) Recover(n int, ramp time.Duration) {
	b.set(func() {
		b.down, b.capacity = false, max(n, 0)
		b.rampStart, b.rampLength = time.Now(), ramp
	})
}

func (b *Backend) set(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// Received returns how many requests the backend has received.
func (b *Backend) Received() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.received
}

// Processed returns how many requests its handler has run, dropped
// responses included.
func (b *Backend) Processed() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.processed
}

// Load returns the traffic per bucket since New, oldest first, without
// gaps, to the bucket of now: the buckets since the last request are
// there, empty.
func (b *Backend) Load() []Bucket {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucketAt(time.Now())
	return append([]Bucket(nil), b.buckets...)
}

// bucketAt returns the bucket of now, adding the buckets up to it; b.mu
// is held. The first reading before b.start (a Backend made before a
// testing/synctest bubble, whose clock starts in 2000) starts the buckets
// again from it; a reading more than maxGap buckets after the last (of
// the real clock, after such a bubble: years later) is of the last
// bucket, not of billions of empty ones.
func (b *Backend) bucketAt(now time.Time) *Bucket {
	if now.Before(b.start) && len(b.buckets) == 0 {
		b.start = now
	}
	idx := max(int(now.Sub(b.start)/b.bucket), 0)
	if n := len(b.buckets); n > 0 && idx-n > maxGap {
		return &b.buckets[n-1]
	}
	for len(b.buckets) <= idx {
		b.buckets = append(b.buckets, Bucket{Start: b.start.Add(time.Duration(len(b.buckets)) * b.bucket)})
	}
	return &b.buckets[idx]
}

// maxGap is the most empty buckets bucketAt adds at once: 100 ms
// buckets for 29 hours, some 40 MB.
const maxGap = 1 << 20

// ReceivedBetween returns how many requests arrived in the buckets that
// start in [from, to).
func (b *Backend) ReceivedBetween(from, to time.Time) int {
	n := 0
	for _, bk := range b.Load() {
		if !bk.Start.Before(from) && bk.Start.Before(to) {
			n += bk.Requests
		}
	}
	return n
}

// fault is what the backend does with one request.
type fault int

const (
	serve fault = iota
	unavailable
	hang
	reset
	drop
)

// admit counts a request and decides its fate.
func (b *Backend) admit(now time.Time) (fault, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.received++
	bk := b.bucketAt(now)
	bk.Requests++
	delay := b.latency
	if b.jitter > 0 {
		if delay += rand.N(b.jitter); delay < b.latency {
			delay = math.MaxInt64 // past any deadline, not wrapped around to none
		}
	}
	switch {
	case b.hang:
		return hang, 0
	case b.reset:
		return reset, delay
	case b.down, b.errorRate > 0 && rand.Float64() < b.errorRate:
		return unavailable, delay
	case b.capacity > 0 && bk.OK >= b.capacityAt(now):
		return unavailable, delay
	}
	bk.OK++
	if b.drop {
		return drop, delay
	}
	return serve, delay
}

// capacityAt is the capacity per bucket, ramping after Recover.
func (b *Backend) capacityAt(now time.Time) int {
	if b.rampLength <= 0 {
		return b.capacity
	}
	f := float64(now.Sub(b.rampStart)) / float64(b.rampLength)
	f = min(max(f, 0.1), 1)
	return max(int(f*float64(b.capacity)), 1)
}

// ServeHTTP answers r according to the faults switched on.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, delay := b.admit(time.Now())
	if f == hang {
		<-r.Context().Done()
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	if f == serve || f == drop {
		b.set(func() { b.processed++ })
	}
	switch f {
	case unavailable:
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
	case reset:
		resetConn(w)
	case drop:
		b.handler.ServeHTTP(httptest.NewRecorder(), r)
		resetConn(w)
	default:
		b.handler.ServeHTTP(w, r)
	}
}

// ErrConnReset is what the in-memory transport returns for a connection
// the backend reset; it matches syscall.ECONNRESET.
var ErrConnReset error = connReset{}

type connReset struct{}

func (connReset) Error() string        { return "chaos: connection reset by peer" }
func (connReset) Is(target error) bool { return target == syscall.ECONNRESET }

// resetter is the in-memory transport's writer.
type resetter interface{ resetConnection() }

// resetConn tears the connection down with a TCP RST where it can.
func resetConn(w http.ResponseWriter) {
	if r, ok := w.(resetter); ok {
		r.resetConnection()
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	conn.Close()
}

// Transport returns an http.RoundTripper that serves requests with the
// backend in memory: no network, so it runs in synctest's fake time. A
// reset or dropped connection is the error [ErrConnReset].
func (b *Backend) Transport() http.RoundTripper { return memTransport{b} }

type memTransport struct{ b *Backend }

type memWriter struct {
	*httptest.ResponseRecorder
	reset bool
}

func (w *memWriter) resetConnection() { w.reset = true }

func (t memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close()
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	w := &memWriter{ResponseRecorder: httptest.NewRecorder()}
	t.b.ServeHTTP(w, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	if w.reset {
		return nil, fmt.Errorf("chaos: %s %s: %w", r.Method, r.URL, ErrConnReset)
	}
	resp := w.Result()
	resp.Request = r
	return resp, nil
}
