package chaos_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/chaos"
)

// get sends one GET through rt and returns the status (0 on error).
func review103Get(ctx context.Context, rt http.RoundTripper) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend/", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// SetCapacity promises at most n requests answered *per bucket*. A Backend
// made outside a synctest bubble (the CHANGELOG says this no longer
// panics) puts every request of the bubble in bucket 0, so the capacity
// becomes a total: after n requests, every later bucket gets only 503s.
func TestReview103CapacityPerBucketOutsideBubble(t *testing.T) {
	b := chaos.New(100*time.Millisecond, nil)
	b.SetCapacity(5)
	synctest.Test(t, func(t *testing.T) {
		ok := 0
		for range 10 { // 10 buckets, 5 requests each: all within capacity
			for range 5 {
				if st, err := review103Get(context.Background(), b.Transport()); err == nil && st == 200 {
					ok++
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ok != 50 {
			t.Errorf("capacity 5 per bucket, 5 requests in each of 10 buckets: %d of 50 answered 200 (Load has %d buckets)", ok, len(b.Load()))
		}
	})
}

// Bucket.OK counts "those let through to the handler (not refused by a
// fault: down, the error rate, the capacity, a reset)". A dropped
// response is let through to the handler (Processed counts it), yet OK
// does not count it, and so the capacity does not bound it either.
func TestReview103DroppedRequestsCountAsLetThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(time.Second, nil)
		b.SetDropResponse(true)
		b.SetCapacity(2)
		for i := range 5 {
			st, err := review103Get(context.Background(), b.Transport())
			switch {
			case i < 2 && !errors.Is(err, chaos.ErrConnReset):
				t.Fatalf("request %d, within capacity, dropped: err %v, want ErrConnReset", i, err)
			case i >= 2 && (err != nil || st != 503):
				t.Fatalf("request %d, over capacity: %d, %v, want 503", i, st, err)
			}
		}
		load := b.Load()
		if got := b.Processed(); got > 2 {
			t.Errorf("capacity 2 per bucket, drop on: the handler ran %d times in one bucket", got)
		}
		if load[0].OK != int(b.Processed()) {
			t.Errorf("Bucket.OK = %d, but the handler ran (let through) %d requests", load[0].OK, b.Processed())
		}
	})
}

// Recover(n, ramp) with n <= 0: SetCapacity's convention is that n <= 0
// means unlimited; Recover(0, 0) leaves a capacity of 1 request per bucket
// for good.
func TestReview103RecoverZeroIsNotOneRequestPerBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(100*time.Millisecond, nil)
		b.SetDown(true)
		b.Recover(0, 0)
		time.Sleep(time.Second)
		ok := 0
		for range 10 {
			if st, _ := review103Get(context.Background(), b.Transport()); st == 200 {
				ok++
			}
		}
		if ok < 10 {
			t.Errorf("after Recover(0, 0) and a second: %d of 10 requests answered 200", ok)
		}
	})
}

// Load "returns the traffic per bucket since New ... without gaps": the
// buckets after the last request, to now, are missing.
func TestReview103LoadCoversUpToNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(100*time.Millisecond, nil)
		_, _ = review103Get(context.Background(), b.Transport())
		time.Sleep(time.Second)
		if n := len(b.Load()); n < 10 {
			t.Errorf("a second after New, idle after the first request: Load has %d buckets of 100 ms", n)
		}
	})
}

// Latency: fixed plus a random share of jitter, in [fixed, fixed+jitter].
// The 503 of down, the reset and the capacity 503 are delayed too.
func TestReview103LatencyBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(0, nil)
		b.SetLatency(50*time.Millisecond, 20*time.Millisecond)
		for range 200 {
			t0 := time.Now()
			st, err := review103Get(context.Background(), b.Transport())
			d := time.Since(t0)
			if err != nil || st != 200 || d < 50*time.Millisecond || d > 70*time.Millisecond {
				t.Fatalf("status %d err %v after %v, want 200 within [50ms, 70ms]", st, err, d)
			}
		}
	})
}

// The error rate: each request 503 with probability p.
func TestReview103ErrorRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(0, nil)
		b.SetErrorRate(0.3)
		bad := 0
		const n = 20000
		for range n {
			if st, _ := review103Get(context.Background(), b.Transport()); st == 503 {
				bad++
			}
		}
		if share := float64(bad) / n; share < 0.28 || share > 0.32 {
			t.Errorf("error rate 0.3: %.3f of %d got 503", share, n)
		}
		if got := b.Load()[0]; got.Requests != n || got.OK != n-bad {
			t.Errorf("bucket %+v, want %d requests, %d OK", got, n, n-bad)
		}
	})
}

// Context honoured: a hang and a latency end when the caller gives up,
// through the in-memory transport, with the caller's error.
func TestReview103ContextHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(0, nil)
		b.SetHang(true)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		t0 := time.Now()
		_, err := review103Get(ctx, b.Transport())
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 30*time.Millisecond {
			t.Errorf("hang: err %v after %v", err, time.Since(t0))
		}
		b.SetHealthy()
		b.SetLatency(time.Hour, 0)
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
		t0 = time.Now()
		_, err = review103Get(ctx, b.Transport())
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 30*time.Millisecond {
			t.Errorf("latency: err %v after %v", err, time.Since(t0))
		}
		if b.Processed() != 0 {
			t.Errorf("processed %d requests whose caller left", b.Processed())
		}
		// An already-cancelled context is not counted as received? It
		// never reaches the backend, as with a real client.
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		before := b.Received()
		if _, err := review103Get(ctx, b.Transport()); !errors.Is(err, context.Canceled) || b.Received() != before {
			t.Errorf("cancelled before sending: err %v, received %d -> %d", err, before, b.Received())
		}
	})
}

// Over a real listener: reset is ECONNRESET, a hung request ends when the
// client gives up and the server closes.
func TestReview103RealServerResetAndHang(t *testing.T) {
	b := chaos.New(0, nil)
	srv := httptest.NewServer(b)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	b.SetReset(true)
	for range 5 {
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("reset: got %d", resp.StatusCode)
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("reset: %v", err)
		}
	}
	b.SetHealthy()
	b.SetHang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("hang answered %d", resp.StatusCode)
	}
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("server Close blocked on a hung request whose client left")
	}
}

// Concurrency: faults switched while traffic runs, counts consistent.
func TestReview103ConcurrentCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(10*time.Millisecond, nil)
		var wg sync.WaitGroup
		var sent, ok200 atomic.Int64
		stop := make(chan struct{})
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch i % 6 {
				case 0:
					b.SetDown(true)
				case 1:
					b.SetErrorRate(0.5)
				case 2:
					b.SetCapacity(3)
				case 3:
					b.Recover(10, 50*time.Millisecond)
				case 4:
					b.SetLatency(time.Millisecond, time.Millisecond)
				case 5:
					b.SetHealthy()
				}
				time.Sleep(3 * time.Millisecond)
			}
		})
		for range 8 {
			wg.Go(func() {
				for range 300 {
					sent.Add(1)
					if st, _ := review103Get(context.Background(), b.Transport()); st == 200 {
						ok200.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		req, okSum := 0, 0
		for _, bk := range b.Load() {
			req += bk.Requests
			okSum += bk.OK
		}
		if int64(req) != sent.Load() || b.Received() != sent.Load() {
			t.Errorf("sent %d, buckets %d, Received %d", sent.Load(), req, b.Received())
		}
		if int64(okSum) != ok200.Load() || b.Processed() != ok200.Load() {
			t.Errorf("200s %d, OK %d, Processed %d", ok200.Load(), okSum, b.Processed())
		}
	})
}
