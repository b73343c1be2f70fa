package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// bigRegistry holds n breakers with long names, so that each event of
// api/events is large.
func review43BigRegistry(t testing.TB, n, nameLen int) (*registry.Registry, []*breaker.Breaker) {
	reg := registry.New()
	var bs []*breaker.Breaker
	for i := range n {
		b := breaker.New(fmt.Sprintf("%04d-%s", i, strings.Repeat("x", nameLen)))
		if err := reg.AddBreaker(b); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	return reg, bs
}

func review43CountGoroutines(substr string) int {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), substr)
}

// A client that opens api/events and never reads: Close is documented to
// end the streams, for http.Server.Shutdown.
func TestReview43CloseEndsAStreamWhoseClientNeverReads(t *testing.T) {
	t.Run("HostileNames1ms", func(t *testing.T) {
		reg, bs := review43BigRegistry(t, 200, 2000) // ~400 KB an event
		defer func() { _ = bs }()
		review43CloseNonReader(t, dashboard.New(reg, dashboard.Interval(time.Millisecond)), 2*time.Second)
	})
	t.Run("500PipelinesDefaultInterval", func(t *testing.T) {
		reg, ps := review43Fleet(t, 500) // ~1 MB an event
		defer func() { _ = ps }()
		review43CloseNonReader(t, dashboard.New(reg), 5*time.Second)
	})
}

func review43CloseNonReader(t *testing.T, h *dashboard.Handler, fill time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	srv.RegisterOnShutdown(h.Close)
	go srv.Serve(ln)
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	// Let the server fill the socket buffers.
	time.Sleep(fill)
	if n := review43CountGoroutines("serveEvents"); n != 1 {
		t.Fatalf("serveEvents goroutines: %d", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err = srv.Shutdown(ctx) // calls h.Close
	t.Logf("Shutdown returned %v after %v; serveEvents goroutines now %d", err, time.Since(start), review43CountGoroutines("serveEvents"))
	if err != nil {
		t.Errorf("Shutdown did not complete although Close was registered: %v (the stream blocked writing to a client that never reads)", err)
	}
}

// The same client, and the dashboard never closed: the handler goroutine
// stays blocked as long as the client keeps the connection open, whatever
// its request context says.
func TestReview43StreamsOfNonReadingClients(t *testing.T) {
	reg, bs := review43BigRegistry(t, 100, 2000)
	defer func() { _ = bs }()
	h := dashboard.New(reg, dashboard.Interval(time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	const clients = 200
	var conns []net.Conn
	for range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
		conns = append(conns, c)
	}
	time.Sleep(3 * time.Second)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	t.Logf("%d non-reading clients: %d serveEvents goroutines, heap in use +%d MB", clients, review43CountGoroutines("serveEvents"), (int64(ms1.HeapInuse)-int64(ms0.HeapInuse))>>20)
	// A reading client meanwhile: how fast does it get events?
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReaderSize(c, 1<<20)
	start := time.Now()
	events := 0
	for time.Since(start) < time.Second {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	t.Logf("a reading client got %d events in 1 s (interval 1 ms)", events)
	c.Close()
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for review43CountGoroutines("serveEvents") > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := review43CountGoroutines("serveEvents"); n > 0 {
		t.Errorf("%d streams still served 5 s after their clients closed", n)
	}
}
