package chaos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func review166Get(t *testing.T, b *Backend, ctx context.Context) (int, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend/", nil)
	resp, err := b.Transport().RoundTrip(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestReview166CapacityPerBucket: SetCapacity(5) answers 5 of 10 requests
// of a bucket, 503 to the rest; the next bucket has 5 again.
func TestReview166CapacityPerBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(100*time.Millisecond, nil)
		b.SetCapacity(5)
		for range 2 {
			ok := 0
			for range 10 {
				if code, err := review166Get(t, b, context.Background()); err == nil && code == 200 {
					ok++
				}
			}
			if ok != 5 {
				t.Errorf("ok = %d of 10, want 5", ok)
			}
			time.Sleep(100 * time.Millisecond)
		}
		l := b.Load()
		if len(l) < 2 || l[0].Requests != 10 || l[0].OK != 5 || l[1].Requests != 10 || l[1].OK != 5 {
			t.Errorf("load = %+v", l)
		}
	})
}

// TestReview166RecoverRamp: Recover(100, 1s) ramps the capacity from 10 to
// 100 over a second: about 10 at once, 50 half-way, 100 at the end.
func TestReview166RecoverRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(100*time.Millisecond, nil)
		b.SetDown(true)
		time.Sleep(100 * time.Millisecond)
		b.Recover(100, time.Second)
		prev := time.Duration(0)
		for _, c := range []struct {
			at   time.Duration
			want int
		}{{0, 10}, {500 * time.Millisecond, 50}, {time.Second, 100}, {2 * time.Second, 100}} {
			time.Sleep(c.at - prev)
			prev = c.at
			ok := 0
			for range 200 {
				if code, err := review166Get(t, b, context.Background()); err == nil && code == 200 {
					ok++
				}
			}
			if ok != c.want {
				t.Errorf("%v into the ramp: %d ok, want %d", c.at, ok, c.want)
			}
		}
	})
}

// TestReview166HangUntilCallerLeaves: a hanging request returns when its
// caller's context ends, not before, and leaves no goroutine.
func TestReview166HangUntilCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(0, nil)
		b.SetHang(true)
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := review166Get(t, b, ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 700*time.Millisecond {
			t.Errorf("returned after %v, want 700ms", d)
		}
		if b.Received() != 1 || b.Processed() != 0 {
			t.Errorf("received %d processed %d, want 1 0", b.Received(), b.Processed())
		}
	})
}

// TestReview166DropRunsHandler: a dropped response ran the handler
// (Processed), counts OK, and the caller gets ErrConnReset.
func TestReview166DropRunsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		b := New(0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
		b.SetDropResponse(true)
		_, err := review166Get(t, b, context.Background())
		if !errors.Is(err, ErrConnReset) || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("err = %v, want ErrConnReset", err)
		}
		if ran != 1 || b.Processed() != 1 || b.Load()[0].OK != 1 {
			t.Errorf("ran %d processed %d load %+v", ran, b.Processed(), b.Load())
		}
	})
}

// TestReview166CountsExactUnderConcurrency: 50 goroutines send 40 requests
// each, spread over time, while the faults are switched; the buckets add
// up to Received, and each bucket's OK <= Requests.
func TestReview166CountsExactUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(10*time.Millisecond, nil)
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := 0
		for g := range 50 {
			wg.Go(func() {
				for i := range 40 {
					time.Sleep(time.Duration(1+(g*7+i*3)%11) * time.Millisecond)
					_, _ = review166Get(t, b, context.Background())
					mu.Lock()
					got++
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			for i := range 30 {
				time.Sleep(7 * time.Millisecond)
				switch i % 5 {
				case 0:
					b.SetDown(true)
				case 1:
					b.SetErrorRate(0.5)
				case 2:
					b.SetCapacity(3)
				case 3:
					b.SetLatency(time.Millisecond, 2*time.Millisecond)
				case 4:
					b.SetHealthy()
				}
			}
		})
		wg.Wait()
		total, ok := 0, 0
		for _, bk := range b.Load() {
			total += bk.Requests
			ok += bk.OK
			if bk.OK > bk.Requests {
				t.Errorf("bucket %+v: OK > Requests", bk)
			}
		}
		if total != 2000 || int64(total) != b.Received() || got != 2000 {
			t.Errorf("buckets %d, Received %d, sent %d; want 2000", total, b.Received(), got)
		}
		if int64(ok) < b.Processed() {
			t.Errorf("OK %d < Processed %d", ok, b.Processed())
		}
	})
}

// TestReview166RealResetIsReset: over a real listener, SetReset reaches the
// client as a connection reset, and the backend counts one request per
// call (no hidden transport retry doubling the load).
func TestReview166RealResetIsReset(t *testing.T) {
	b := New(0, nil)
	srv := httptest.NewServer(b)
	defer srv.Close()
	b.SetReset(true)
	client := &http.Client{Timeout: 2 * time.Second}
	// Warm a keep-alive connection first, as a real client has.
	b.SetReset(false)
	if resp, err := client.Get(srv.URL); err == nil {
		resp.Body.Close()
	}
	b.SetReset(true)
	before := b.Received()
	_, err := client.Get(srv.URL)
	if err == nil {
		t.Fatal("no error from a reset connection")
	}
	if n := b.Received() - before; n != 1 {
		t.Errorf("one GET reached the backend %d times (err %v)", n, err)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Logf("note: client error is %v, not ECONNRESET", err)
	}
}

// TestReview166MadeOutsideBubble: a Backend made outside a bubble, first
// called inside, counts from its first request.
func TestReview166MadeOutsideBubble(t *testing.T) {
	b := New(100*time.Millisecond, nil)
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(50 * time.Millisecond)
		_, _ = review166Get(t, b, context.Background())
		time.Sleep(120 * time.Millisecond)
		_, _ = review166Get(t, b, context.Background())
		l := b.Load()
		if len(l) != 2 || l[0].Requests != 1 || l[1].Requests != 1 {
			t.Errorf("load = %+v, want two buckets of one", l)
		}
	})
}

// TestReview166RealHangLeavesNothing: over a real listener, 20 hanging
// requests whose callers give up after 100 ms leave no handler goroutine.
func TestReview166RealHangLeavesNothing(t *testing.T) {
	b := New(0, nil)
	srv := httptest.NewServer(b)
	b.SetHang(true)
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Error("a hanging request was answered")
			}
		})
	}
	wg.Wait()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("%d goroutines left, %d before", n, before)
	}
	srv.Close()
	if b.Received() != 20 || b.Processed() != 0 {
		t.Errorf("received %d processed %d", b.Received(), b.Processed())
	}
}
