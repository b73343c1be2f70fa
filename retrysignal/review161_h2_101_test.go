package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Over HTTP/2, net/http takes a WriteHeader(101) as informational (it
// sends a 1xx HEADERS frame and waits for the final status); the Go
// client skips it and waits for the final answer. A Handler whose
// function wrote a 101 and then failed (an upgrade attempted over h2,
// whose hijack fails) must not have its failure turned into the empty 200
// the server sends for a handler that wrote no final status.
func TestReview161_Handler_101OverHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Upgrade", "websocket")
		w.WriteHeader(http.StatusSwitchingProtocols)
		if _, _, err := http.NewResponseController(w).Hijack(); err != nil {
			return resilience.Terminal(errors.New("upgrade failed: " + err.Error()))
		}
		return nil
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Skipf("not HTTP/2: %s", resp.Proto)
	}
	if resp.StatusCode < 400 {
		t.Errorf("a failed handler answered %d %q over HTTP/2 (its error hidden)", resp.StatusCode, b)
	}
}

// Over HTTP/1.1 the 101 is final: the error after it is not answered
// again (the fix's intent).
func TestReview161_Handler_101OverHTTP1(t *testing.T) {
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Upgrade", "x")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return resilience.Terminal(errors.New("after"))
	}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// Control: a 103 then an error over HTTP/2 is answered (the path a 101
// took before the fix).
func TestReview161_Handler_103OverHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusEarlyHints)
		return resilience.Terminal(errors.New("dep"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusBadGateway || !retrysignal.NoRetry(resp.Header) {
		t.Errorf("%s %d %v", resp.Proto, resp.StatusCode, resp.Header)
	}
}
