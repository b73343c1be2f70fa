package dashboard_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

type plainWriter struct{ w http.ResponseWriter }

func (p plainWriter) Header() http.Header         { return p.w.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainWriter) WriteHeader(c int)           { p.w.WriteHeader(c) }

// Behind a wrapper that cannot flush, over a real server: one event, a
// retry field of the interval in ms, and the response ends at once; a
// browser-like parser sees exactly one data event and the retry value.
func TestReview101EventsRetryField(t *testing.T) {
	for _, iv := range []time.Duration{250 * time.Millisecond, 1500 * time.Microsecond, 100 * time.Microsecond} {
		h := dashboard.New(registry.New(), dashboard.Interval(iv))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(plainWriter{w}, r)
		}))
		start := time.Now()
		resp, err := http.Get(srv.URL + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var data, retry []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data:"):
				data = append(data, line)
			case strings.HasPrefix(line, "retry:"):
				retry = append(retry, strings.TrimSpace(strings.TrimPrefix(line, "retry:")))
			}
		}
		resp.Body.Close()
		took := time.Since(start)
		srv.Close()
		h.Close()
		want := iv.Milliseconds()
		if want < 1 {
			want = 1
		}
		if len(data) != 1 || len(retry) != 1 || retry[0] != strings.TrimSpace(strings.Repeat(" ", 0)+itoa(want)) {
			t.Errorf("interval %v: data %d, retry %q (want %d)", iv, len(data), retry, want)
		}
		if took > 2*time.Second {
			t.Errorf("interval %v: the response took %v", iv, took)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("content type %q", ct)
		}
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
