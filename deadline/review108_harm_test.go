package deadline_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
)

// review108: raw requests with hostile budget headers reach a handler
// behind Middleware that streams for longer than any budget, ignoring its
// context: each completes, whole, as without the Middleware; a valid
// budget bounds the context only.
func TestReview108HostileHeadersDoNoHarm(t *testing.T) {
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, hasDL := r.Context().Deadline()
		if len(r.Header.Values(deadline.Header)) != 0 {
			t.Errorf("the header reached the handler: %q", r.Header.Values(deadline.Header))
		}
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "chunk%d;", i)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprintf(w, "dl=%v", hasDL)
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		lines  string
		wantDL bool
	}{
		{"Request-Timeout-Ms: 5\r\n", true},
		{"request-timeout-ms: 5\r\n", true},
		{"REQUEST-TIMEOUT-MS:   7   \r\n", true},
		{"Request-Timeout-Ms: 0\r\n", false},
		{"Request-Timeout-Ms: -5\r\n", false},
		{"Request-Timeout-Ms: +5\r\n", false},
		{"Request-Timeout-Ms: 5ms\r\n", false},
		{"Request-Timeout-Ms: 1 0\r\n", false},
		{"Request-Timeout-Ms: 5,5\r\n", false},
		{"Request-Timeout-Ms: 9999999999\r\n", false},
		{"Request-Timeout-Ms: 0000000001\r\n", false},
		{"Request-Timeout-Ms: 999999999\r\n", true},
		{"Request-Timeout-Ms: \r\n", false},
		{"Request-Timeout-Ms: 5\r\nrequest-timeout-ms: 5\r\n", false},
		{"Request-Timeout-Ms: \t5\t\r\n", true},
		{"Request-Timeout-Ms: " + strings.Repeat("9", 4000) + "\r\n", false},
		{"Request-Timeout-Ms: ５\r\n", false},
	}
	for _, c := range cases {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", c.lines)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("%q: %v", c.lines, err)
			conn.Close()
			continue
		}
		b, err := io.ReadAll(resp.Body)
		conn.Close()
		want := fmt.Sprintf("chunk0;chunk1;chunk2;chunk3;chunk4;dl=%v", c.wantDL)
		if err != nil || resp.StatusCode != 200 || string(b) != want {
			t.Errorf("%q: status %d, body %q, err %v; want %q", c.lines, resp.StatusCode, b, err, want)
		}
	}
}
