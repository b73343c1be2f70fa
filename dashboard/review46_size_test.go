package dashboard_test

import (
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/dashboard"
)

func TestReview46_EventSize(t *testing.T) {
	reg, bs := review46Registry(t, 400)
	defer runtime.KeepAlive(bs)
	h := dashboard.New(reg, dashboard.Interval(50*time.Millisecond))
	ts := review46Server(t, h, false)
	resp, err := ts.Client().Get(ts.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	t.Logf("state: %d bytes", len(b))
}

// timedWriter records how long each Write of the stream took.
type review46TimedWriter struct {
	http.ResponseWriter
	t     *testing.T
	start time.Time
}

func (w *review46TimedWriter) Write(b []byte) (int, error) {
	s := time.Now()
	n, err := w.ResponseWriter.Write(b)
	w.t.Logf("at %6.2fs: write of %d bytes took %v: n=%d err=%v", time.Since(w.start).Seconds(), len(b), time.Since(s).Round(time.Millisecond), n, err)
	return n, err
}

func (w *review46TimedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestReview46_SlowReaderTimeline(t *testing.T) {
	reg, bs := review46Registry(t, 400)
	defer runtime.KeepAlive(bs)
	h := dashboard.New(reg, dashboard.Interval(50*time.Millisecond))
	defer h.Close()
	start := time.Now()
	done := make(chan struct{})
	ts := review46Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		h.ServeHTTP(&review46TimedWriter{w, t, start}, r)
		t.Logf("at %6.2fs: the stream ended", time.Since(start).Seconds())
	}), false)
	resp, err := ts.Client().Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 5000)
	for time.Since(start) < 14*time.Second {
		select {
		case <-done:
			t.Errorf("the stream ended while its client reads at ~50 KB/s, events of 163 KB")
			return
		default:
		}
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type review46Writes struct {
	http.ResponseWriter
	last *atomic.Int64
}

func (w *review46Writes) Write(b []byte) (int, error) {
	s := time.Now()
	n, err := w.ResponseWriter.Write(b)
	w.last.Store(int64(time.Since(s)))
	return n, err
}

func (w *review46Writes) Unwrap() http.ResponseWriter { return w.ResponseWriter }
