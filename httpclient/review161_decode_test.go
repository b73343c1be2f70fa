package httpclient_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func review161Serve(body string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	}))
}

// The Client's doc: "A 2xx whose body, read whole, is not JSON or not of
// the type decoded into is an error of class terminal (502 for
// retrysignal.Status, with the signal)". Each of these bodies arrives
// whole (its Content-Length) and is not a JSON document of the type.
func TestReview161_Decode_WholeButNotJSON(t *testing.T) {
	type T struct{ A int }
	for _, tc := range []struct{ name, body string }{
		{"syntax", `<html>oops</html>`},
		{"type", `{"A":"x"}`},
		{"empty", ``},
		{"truncated-document", `{"A":`},
		{"whitespace-only", "  \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := review161Serve(tc.body)
			defer srv.Close()
			c := httpclient.New(httpclient.WithPipeline(review161Pipeline()))
			var out T
			err := c.GetJSON(context.Background(), srv.URL, &out)
			if err == nil {
				t.Fatal("no error")
			}
			if cl := resilience.Classify(err); cl != resilience.ClassTerminal {
				t.Errorf("body %q read whole: class %v, want terminal (%v)", tc.body, cl, err)
			}
			if s := retrysignal.Status(err); s != http.StatusBadGateway {
				t.Errorf("Status %d, want 502", s)
			}
			if !retrysignal.Retried(err) {
				t.Errorf("no signal")
			}
		})
	}
}

// out that is not a pointer is the caller's own fault, not the
// dependency's: no class that counts against it or asks for a retry.
func TestReview161_Decode_CallerNonPointer(t *testing.T) {
	srv := review161Serve(`{"A":1}`)
	defer srv.Close()
	c := httpclient.New(httpclient.WithPipeline(review161Pipeline()))
	type T struct{ A int }
	err := c.GetJSON(context.Background(), srv.URL, T{})
	if err == nil {
		t.Fatal("no error")
	}
	cl := resilience.Classify(err)
	if cl == resilience.ClassTransient || cl == resilience.ClassTerminal {
		t.Errorf("caller's non-pointer out: class %v (a dependency's failure), want rejected: %v", cl, err)
	}
}

// A body cut by the network (fewer bytes than its Content-Length) is a
// read that failed: left as the read's error, not terminal.
func TestReview161_Decode_CutByNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"A\":[1,2,")
			}()
		}
	}()
	c := httpclient.New(httpclient.WithPipeline(review161Pipeline()))
	var out struct{ A []int }
	err = c.GetJSON(context.Background(), "http://"+ln.Addr().String(), &out)
	if err == nil {
		t.Fatal("no error")
	}
	if cl := resilience.Classify(err); cl == resilience.ClassTerminal {
		t.Errorf("a cut body is terminal: %v", err)
	}
	// the same bytes cut mid-syntax: a cut that ends in an invalid token
	_ = out
}
