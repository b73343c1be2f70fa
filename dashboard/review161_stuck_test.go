package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// A client of api/events that stopped reading (its socket full) slows
// neither the calls nor another page's events; Close then Shutdown ends
// within closeGrace (1 s) and a little.
func TestReview161_StuckClient(t *testing.T) {
	reg := registry.New()
	var keep []*pipeline.Pipeline
	for i := range 300 {
		name := fmt.Sprintf("%s-%d", strings.Repeat("n", 2000), i)
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New(name))))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, p)
	}
	h := dashboard.New(reg, dashboard.Interval(40*time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	srv.RegisterOnShutdown(h.Close)
	go srv.Serve(ln)
	defer srv.Close()

	// The stuck client: asks for events, never reads, tiny buffer.
	stuck, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	stuck.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(stuck, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(400 * time.Millisecond) // its socket fills

	// Another page gets its events at the interval.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReaderSize(conn, 1<<20)
	start := time.Now()
	events := 0
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for events < 5 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", events, err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("5 events took %v with a stuck client (interval 40ms)", el)
	}
	// Calls are not slowed.
	cs := time.Now()
	for range 1000 {
		pipeline.Do(context.Background(), keep[0], func(ctx context.Context) (int, error) { return 1, nil })
	}
	if el := time.Since(cs); el > 500*time.Millisecond {
		t.Errorf("1000 calls took %v", el)
	}
	// Shutdown, with the stuck stream.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	ss := time.Now()
	err = srv.Shutdown(ctx)
	if el := time.Since(ss); err != nil || el > 2500*time.Millisecond {
		t.Errorf("Shutdown: %v after %v", err, el)
	}
}
