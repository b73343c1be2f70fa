package chaos

import (
	"math"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A Backend made outside a synctest bubble, used in one (its doc says this
// is supported: its buckets restart from the bubble's first request), then
// read after the bubble: Load must return promptly with a bounded slice.
// Run in a child process with a memory cap, since the failure mode is an
// unbounded allocation.
func TestReview131LoadAfterBubble(t *testing.T) {
	if os.Getenv("REVIEW131_CHILD") == "1" {
		b := New(100*time.Millisecond, nil)
		synctest.Test(t, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://x/", nil)
			resp, err := b.Transport().RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
		n := len(b.Load()) // outside the bubble now: real clock
		if n > 1_000_000 {
			t.Fatalf("Load after the bubble returned %d buckets", n)
		}
		return
	}
	cmd := exec.Command("sh", "-c", "ulimit -v 3000000; exec \"$0\" -test.run='^TestReview131LoadAfterBubble$' -test.count=1", os.Args[0])
	cmd.Env = append(os.Environ(), "REVIEW131_CHILD=1")
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Load after a synctest bubble, on a Backend made outside it: child failed: %v\n%.2000s", err, out)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("Load after a synctest bubble did not return within 20 s")
	}
}

// SetLatency accepts any non-negative fixed and jitter; the delay is
// "fixed plus a random share of jitter", so every answer must be delayed
// at least by fixed. Large values overflow the sum to a negative delay,
// and the request is answered at once.
func TestReview131LatencyOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(0, nil)
		fixed, jitter := time.Duration(math.MaxInt64-1000), time.Second
		b.SetLatency(fixed, jitter)
		immediate := 0
		const n = 200
		for range n {
			f, d := b.admit(time.Now())
			if f != serve {
				t.Fatalf("fault %v", f)
			}
			if d < fixed {
				immediate++
			}
		}
		if immediate > 0 {
			t.Errorf("SetLatency(%v, %v): %d of %d requests got a delay below fixed (overflowed)", fixed, jitter, immediate, n)
		}
	})
}

// Error rates 0 and 1 exact; 0.3 close; concurrent counts consistent.
func TestReview131ErrorRateConcurrent(t *testing.T) {
	for _, p := range []float64{0, 1, 0.3, math.SmallestNonzeroFloat64, math.Nextafter(1, 0)} {
		b := New(time.Second, nil)
		b.SetErrorRate(p)
		tr := b.Transport()
		var mu sync.Mutex
		failed, ok := 0, 0
		var wg sync.WaitGroup
		const workers, each = 8, 2000
		for range workers {
			wg.Go(func() {
				for range each {
					req, _ := http.NewRequest("GET", "http://x/", nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					mu.Lock()
					if resp.StatusCode == 503 {
						failed++
					} else {
						ok++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		total := workers * each
		if b.Received() != int64(total) || b.Processed() != int64(ok) {
			t.Errorf("p=%v: received %d processed %d, want %d %d", p, b.Received(), b.Processed(), total, ok)
		}
		sumReq, sumOK := 0, 0
		for _, bk := range b.Load() {
			sumReq += bk.Requests
			sumOK += bk.OK
		}
		if sumReq != total || sumOK != ok {
			t.Errorf("p=%v: buckets %d/%d, want %d/%d", p, sumReq, sumOK, total, ok)
		}
		got := float64(failed) / float64(total)
		if math.Abs(got-p) > 0.03 {
			t.Errorf("p=%v: failure share %v", p, got)
		}
		if p == 0 && failed != 0 || p == 1 && ok != 0 {
			t.Errorf("p=%v: %d failed %d ok", p, failed, ok)
		}
	}
}

// Capacity: exactly n OK per bucket under concurrency; ramp from n/10.
func TestReview131CapacityExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(100*time.Millisecond, nil)
		b.SetCapacity(7)
		tr := b.Transport()
		for range 5 {
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					req, _ := http.NewRequest("GET", "http://x/", nil)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond)
		}
		for i, bk := range b.Load() {
			if bk.Requests > 0 && bk.OK != 7 {
				t.Errorf("bucket %d: %d OK of %d, want 7", i, bk.OK, bk.Requests)
			}
		}
		b.Recover(100, time.Second)
		if got := b.capacityAt(time.Now()); got != 10 {
			t.Errorf("ramp start capacity %d, want 10", got)
		}
		if got := b.capacityAt(time.Now().Add(2 * time.Second)); got != 100 {
			t.Errorf("ramp end capacity %d, want 100", got)
		}
	})
}
