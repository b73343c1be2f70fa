package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A PUT or POST whose body (no GetBody) comes from a producer that
// stalls: the caller's deadline must still end the call on time. README:
// "the time budget makes sure no call outlives the time its caller has";
// MaxBufferedBody: "Such a stream is closed when the caller's context
// ends, so that one whose writer stalled does not hold the request
// (net/http waits for it for good)". net/http's plain client hangs here
// too (it waits for its write loop, blocked in the caller's Read), so
// this is no harm next to it: the toolkit's own promise.
func TestReview169_StalledKnownLengthBodyHonoursDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	for _, c := range review169Clients(review169Base)[1:] {
		for _, m := range []struct {
			method string
			cl     int64
		}{{"PUT", -1}, {"POST", -1}, {"PUT", 1000}, {"POST", 1000}, {"PUT", 2 << 20}} {
			method := m.method
			pr, pw := io.Pipe()
			go func() { pw.Write([]byte("first bytes")) }() // then stalls
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, method, srv.URL, pr)
			req.ContentLength = m.cl
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				resp, err := c.hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if el := time.Since(start); el > 800*time.Millisecond {
					t.Errorf("%s %s length %d: returned after %v (%v), the caller's deadline was 300ms", c.name, method, m.cl, el, err)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("%s %s length %d: still running 2s after a call whose caller's deadline was 300ms", c.name, method, m.cl)
			}
			pw.CloseWithError(errors.New("test over")) // unblocks it
			cancel()
		}
	}
}
