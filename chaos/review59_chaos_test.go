package chaos_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/chaos"
)

func r59get(t *testing.T, rt http.RoundTripper, url string, timeout time.Duration) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A Backend made outside a synctest bubble and called inside one (or a
// clock that reads before New's) panics in admit: a negative bucket index.
// The storm's own counter clamps it (max(..., 0)).
func TestReview59BackendFromOutsideTheBubble(t *testing.T) {
	b := chaos.New(100*time.Millisecond, nil)
	synctest.Test(t, func(t *testing.T) {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("the in-memory transport panicked: %v", r)
			}
		}()
		_, _ = r59get(t, b.Transport(), "http://x/", time.Second)
	})
}

// SetCapacity after Recover: the ramp still applies, so the capacity is
// not n as SetCapacity documents.
func TestReview59SetCapacityAfterRecover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(time.Second, nil)
		b.Recover(100, time.Hour)
		b.SetCapacity(50)
		ok := 0
		for range 60 {
			if code, _ := r59get(t, b.Transport(), "http://x/", time.Second); code == 200 {
				ok++
			}
		}
		if ok != 50 {
			t.Errorf("SetCapacity(50) after Recover: %d of 60 answered in one bucket, want 50", ok)
		}
	})
}

// Hammer: faults switched by many goroutines while requests go through the
// in-memory transport and a real listener; invariants of the counts.
func TestReview59ConcurrentFaultsAndCounts(t *testing.T) {
	b := chaos.New(10*time.Millisecond, nil)
	srv := httptest.NewServer(b)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	var setters sync.WaitGroup
	for i := range 4 {
		setters.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (i + j) % 9 {
				case 0:
					b.SetDown(j%2 == 0)
				case 1:
					b.SetErrorRate(float64(j%10) / 10)
				case 2:
					b.SetLatency(time.Duration(j%3)*time.Millisecond, time.Millisecond)
				case 3:
					b.SetCapacity(j % 20)
				case 4:
					b.Recover(10, 50*time.Millisecond)
				case 5:
					b.SetReset(j%5 == 0)
				case 6:
					b.SetDropResponse(j%7 == 0)
				case 7:
					b.SetHealthy()
				case 8:
					_ = b.Load()
					_ = b.ReceivedBetween(time.Now().Add(-time.Second), time.Now())
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	deadline := time.Now().Add(2 * time.Second)
	for w := range 32 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				sent.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				var rt http.RoundTripper = b.Transport()
				url := "http://mem/"
				if w%2 == 0 {
					rt, url = client.Transport, srv.URL
				}
				// POST: net/http sends a GET again by itself when the
				// connection it reused was reset before an answer, which
				// would count one request sent as two received.
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, http.NoBody)
				resp, err := rt.RoundTrip(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				} else if errors.Is(err, chaos.ErrConnReset) {
					// fine
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(stop)
	setters.Wait()
	b.SetHealthy()
	time.Sleep(50 * time.Millisecond)
	total, okSum := 0, 0
	for _, bk := range b.Load() {
		total += bk.Requests
		okSum += bk.OK
		if bk.OK > bk.Requests {
			t.Errorf("bucket %+v: OK > Requests", bk)
		}
	}
	if int64(total) != b.Received() {
		t.Errorf("sum of Load %d != Received %d", total, b.Received())
	}
	if b.Received() > sent.Load() {
		t.Errorf("received %d > sent %d", b.Received(), sent.Load())
	}
	t.Logf("sent %d received %d processed %d ok %d", sent.Load(), b.Received(), b.Processed(), okSum)
}
