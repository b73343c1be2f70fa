package chaos_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/chaos"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get calls the backend in memory and returns the status, or 0 and the
// error.
func get(ctx context.Context, b *chaos.Backend) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend/", nil)
	resp, err := b.Transport().RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name       string
		set        func(b *chaos.Backend)
		status     int
		reset      bool
		wait       time.Duration
		processed  int64
		ctxTimeout time.Duration
	}{
		{"healthy", func(*chaos.Backend) {}, 200, false, 0, 1, 0},
		{"down", func(b *chaos.Backend) { b.SetDown(true) }, 503, false, 0, 0, 0},
		{"error rate 1", func(b *chaos.Backend) { b.SetErrorRate(1) }, 503, false, 0, 0, 0},
		{"latency", func(b *chaos.Backend) { b.SetLatency(300*time.Millisecond, 0) }, 200, false, 300 * time.Millisecond, 1, 0},
		{"hang until the caller gives up", func(b *chaos.Backend) { b.SetHang(true) }, 0, false, 2 * time.Second, 0, 2 * time.Second},
		{"latency past the caller's deadline", func(b *chaos.Backend) { b.SetLatency(5*time.Second, 0) }, 0, false, time.Second, 0, time.Second},
		{"reset", func(b *chaos.Backend) { b.SetReset(true) }, 0, true, 0, 0, 0},
		{"drop the response", func(b *chaos.Backend) { b.SetDropResponse(true) }, 0, true, 0, 1, 0},
		{"healthy again", func(b *chaos.Backend) { b.SetDown(true); b.SetReset(true); b.SetHealthy() }, 200, false, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := chaos.New(0, nil)
				tt.set(b)
				ctx := t.Context()
				if tt.ctxTimeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
					defer cancel()
				}
				start := time.Now()
				status, err := get(ctx, b)
				assert.Equal(t, tt.wait, time.Since(start))
				assert.Equal(t, tt.status, status)
				if tt.reset {
					require.ErrorIs(t, err, syscall.ECONNRESET)
				}
				if tt.status == 0 && !tt.reset {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				assert.EqualValues(t, 1, b.Received())
				assert.Equal(t, tt.processed, b.Processed())
			})
		})
	}
}

func TestCapacityAndSlowRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(100*time.Millisecond, nil)
		b.SetCapacity(3)
		var ok int
		for range 5 {
			if s, _ := get(t.Context(), b); s == 200 {
				ok++
			}
		}
		assert.Equal(t, 3, ok, "3 per bucket, the rest overloaded")

		b.SetDown(true)
		time.Sleep(100 * time.Millisecond)
		b.Recover(100, time.Second)
		ok = 0
		for range 50 {
			if s, _ := get(t.Context(), b); s == 200 {
				ok++
			}
		}
		assert.Equal(t, 10, ok, "a tenth of the capacity right after the outage")
		time.Sleep(time.Second)
		ok = 0
		for range 150 {
			if s, _ := get(t.Context(), b); s == 200 {
				ok++
			}
		}
		assert.Equal(t, 100, ok, "full capacity after the ramp")
	})
}

func TestLoadPerBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := chaos.New(time.Second, nil)
		start := time.Now()
		for i := range 3 {
			for range i + 1 {
				_, _ = get(t.Context(), b)
			}
			time.Sleep(time.Second)
		}
		b.SetDown(true)
		_, _ = get(t.Context(), b)
		load := b.Load()
		require.Len(t, load, 4)
		for i, want := range []chaos.Bucket{{start, 1, 1}, {start.Add(time.Second), 2, 2}, {start.Add(2 * time.Second), 3, 3}, {start.Add(3 * time.Second), 1, 0}} {
			assert.Equal(t, want, load[i])
		}
		assert.Equal(t, 5, b.ReceivedBetween(start.Add(time.Second), start.Add(3*time.Second)))
	})
}

func TestRealConnectionsAreResetAndDropped(t *testing.T) {
	b := chaos.New(0, nil)
	srv := httptest.NewServer(b)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()

	for _, set := range []func(bool){b.SetReset, b.SetDropResponse} {
		set(true)
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		assert.Error(t, err)
		set(false)
	}
	assert.EqualValues(t, 1, b.Processed(), "the dropped request was processed")
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
}

func TestNonsenseFaultsPanic(t *testing.T) {
	b := chaos.New(time.Second, nil)
	assert.Panics(t, func() { b.SetErrorRate(math.NaN()) })
	assert.Panics(t, func() { b.SetErrorRate(1.5) })
	assert.Panics(t, func() { b.SetLatency(-time.Second, 0) })
}
