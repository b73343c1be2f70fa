package httpclient_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// echo handler: full duplex, reads a line, writes it back, flushes.
func review77Echo(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.WriteHeader(200)
	http.NewResponseController(w).Flush()
	br := bufio.NewReader(r.Body)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			io.WriteString(w, line)
			http.NewResponseController(w).Flush()
		}
		if err != nil {
			return
		}
	}
}

// review77Duplex runs a bidirectional exchange over rt: write a line, read its
// echo, three times. Returns an error describing the first failure.
func review77Duplex(rt http.RoundTripper, url, method string) error {
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(method, url, pr)
	type res struct {
		resp *http.Response
		err  error
	}
	ch := make(chan res, 1)
	go func() { resp, err := rt.RoundTrip(req); ch <- res{resp, err} }()
	// First line before the response: like a gRPC stream.
	if _, err := io.WriteString(pw, "line0\n"); err != nil {
		return fmt.Errorf("write 0: %w", err)
	}
	var r res
	select {
	case r = <-ch:
	case <-time.After(3 * time.Second):
		pw.CloseWithError(errors.New("timeout"))
		return errors.New("RoundTrip did not return within 3s (body buffered?)")
	}
	if r.err != nil {
		return fmt.Errorf("roundtrip: %w", r.err)
	}
	defer r.resp.Body.Close()
	br := bufio.NewReader(r.resp.Body)
	if l, err := br.ReadString('\n'); err != nil || l != "line0\n" {
		return fmt.Errorf("read 0: %q %v", l, err)
	}
	for i := 1; i < 3; i++ {
		if _, err := fmt.Fprintf(pw, "line%d\n", i); err != nil {
			return fmt.Errorf("write %d after RoundTrip returned: %w", i, err)
		}
		l, err := br.ReadString('\n')
		if err != nil || l != fmt.Sprintf("line%d\n", i) {
			return fmt.Errorf("read %d: %q %v", i, l, err)
		}
	}
	pw.Close()
	return nil
}

// TestReview77_FullDuplexH2: a full-duplex exchange (a line written, its
// echo read, three times) over HTTP/2, POST (sent once) and PUT (retried:
// sent as it is read, never ahead): what a plain transport completes, so
// does the Transport.
func TestReview77_FullDuplexH2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(review77Echo))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	plain := srv.Client().Transport
	for _, method := range []string{"POST", "PUT"} {
		if err := review77Duplex(plain, srv.URL, method); err != nil {
			t.Fatalf("plain %s: %v", method, err)
		}
		ours := httpclient.NewTransport(httpclient.Base(plain))
		if err := review77Duplex(ours, srv.URL, method); err != nil {
			t.Errorf("ours %s (plain ok): %v", method, err)
		}
	}
}

// TestReview77_FullDuplexH1 is the same over HTTP/1.1, whose handler
// enables full duplex.
func TestReview77_FullDuplexH1(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(review77Echo))
	defer srv.Close()
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	for _, method := range []string{"POST", "PUT"} {
		if err := review77Duplex(plain, srv.URL, method); err != nil {
			t.Fatalf("plain %s: %v", method, err)
		}
		ours := httpclient.NewTransport(httpclient.Base(plain))
		if err := review77Duplex(ours, srv.URL, method); err != nil {
			t.Errorf("ours %s (plain ok): %v", method, err)
		}
	}
}
