package retrysignal_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review158Rec records what reaches the server's writer.
type review158Rec struct {
	h       http.Header
	codes   []int
	written []byte
}

func (r *review158Rec) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}
func (r *review158Rec) WriteHeader(c int) { r.codes = append(r.codes, c) }
func (r *review158Rec) Write(p []byte) (int, error) {
	r.written = append(r.written, p...)
	return len(p), nil
}

// A 101 Switching Protocols is a final status in net/http (WriteHeader(101)
// is not an informational 1xx: the response is committed and the
// connection is the protocol's). An error returned after it must not be
// answered with a second status and a problem document written into the
// switched stream.
func TestReview158_SwitchingProtocolsStartsTheResponse(t *testing.T) {
	rec := &review158Rec{}
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Upgrade", "example/1")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
		return resilience.Terminal(errors.New("dependency failed after retrying"))
	})
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if len(rec.codes) != 1 || len(rec.written) != 0 || rec.h.Get(retrysignal.NoRetryHeader) != "" {
		t.Fatalf("after a 101 the Handler answered again: statuses %v, body %q, No-Retry %q",
			rec.codes, rec.written, rec.h.Get(retrysignal.NoRetryHeader))
	}
}

// Over a real server: a handler that sends 101 then fails must not have a
// problem document (with No-Retry) written after the 101 onto the wire.
func TestReview158_SwitchingProtocolsOverTheWire(t *testing.T) {
	var logged strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&review158Sync{b: &logged}, nil)))
	defer slog.SetDefault(prev)
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Upgrade", "example/1")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
		return resilience.Terminal(errors.New("dependency failed after retrying"))
	}))
	defer srv.Close()
	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: example/1\r\n\r\n")
	all, _ := io.ReadAll(bufio.NewReader(conn))
	s := string(all)
	if !strings.HasPrefix(s, "HTTP/1.1 101") {
		t.Fatalf("got %q", s)
	}
	t.Logf("wire: %q", s)
	if strings.Contains(s, "do not retry") || strings.Count(s, "HTTP/1.1 ") > 1 {
		t.Fatalf("a problem document (the don't-retry answer) was written into the switched connection:\n%q", s)
	}
	srv.Close()
	if !strings.Contains(logged.String(), "after starting its response") {
		t.Fatalf("the error returned after the 101 was neither answered nor logged (Handler's doc: logged with slog); log: %q", logged.String())
	}
}

type review158Sync struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *review158Sync) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
