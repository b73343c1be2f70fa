package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

// review46Registry returns a registry with n breakers with long names, and
// the breakers (the registry holds them weakly).
func review46Registry(t testing.TB, n int) (*registry.Registry, []*breaker.Breaker) {
	reg := registry.New()
	var bs []*breaker.Breaker
	for i := 0; i < n; i++ {
		b := breaker.New(fmt.Sprintf("breaker-%05d-%s", i, strings.Repeat("x", 200)))
		if err := reg.AddBreaker(b); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	return reg, bs
}

// tracked wraps h and reports when each event stream's ServeHTTP returns.
type review46Tracked struct {
	h       http.Handler
	active  atomic.Int32
	returns chan time.Time
}

func (t *review46Tracked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/api/events") {
		t.active.Add(1)
		defer func() {
			t.active.Add(-1)
			select {
			case t.returns <- time.Now():
			default:
			}
		}()
	}
	t.h.ServeHTTP(w, r)
}

func review46Server(t *testing.T, h http.Handler, h2 bool) *httptest.Server {
	ts := httptest.NewUnstartedServer(h)
	if h2 {
		ts.EnableHTTP2 = true
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts
}

// A client that sends the request and never reads: Close cuts its
// stream within a second, HTTP/1.1 over raw TCP.
func TestReview46_CloseCutsNonReaderHTTP1(t *testing.T) {
	reg, bs := review46Registry(t, 400)
	defer runtime.KeepAlive(bs)
	h := dashboard.New(reg, dashboard.Interval(10*time.Millisecond))
	tr := &review46Tracked{h: h, returns: make(chan time.Time, 16)}
	ts := review46Server(t, tr, false)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(3 * time.Second) // the server's writes fill the buffers and block
	review46CloseCuts(t, h, tr)
}

// HTTP/2 (TLS): a client that stops reading its stream (flow control
// blocks the server's writes): Close cuts it within a second.
func TestReview46_CloseCutsNonReaderHTTP2(t *testing.T) {
	reg, bs := review46Registry(t, 400)
	defer runtime.KeepAlive(bs)
	h := dashboard.New(reg, dashboard.Interval(10*time.Millisecond))
	tr := &review46Tracked{h: h, returns: make(chan time.Time, 16)}
	ts := review46Server(t, tr, true)
	c := ts.Client()
	resp, err := c.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s", resp.Proto)
	}
	// read nothing: the stream's window (4 MB) fills
	time.Sleep(4 * time.Second)
	review46CloseCuts(t, h, tr)
}

// review46CloseCuts closes h, whose one stream (tracked by tr) waits to
// write to a client that does not read, and checks that it ends within
// the second that Close gives a write in progress.
func review46CloseCuts(t *testing.T, h *dashboard.Handler, tr *review46Tracked) {
	t.Helper()
	if tr.active.Load() != 1 {
		t.Fatalf("stream not active: %d", tr.active.Load())
	}
	start := time.Now()
	h.Close()
	select {
	case at := <-tr.returns:
		t.Logf("the stream ended %v after Close", at.Sub(start))
		if at.Sub(start) > 1500*time.Millisecond {
			t.Errorf("slow cut: %v", at.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a client that does not read was not cut by Close")
	}
}

// A stream asked for after Close gets one event, then ends, within
// closeGrace (1 s); HTTP/1.1 and HTTP/2.
func TestReview46_StreamAfterClose(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			reg, bs := review46Registry(t, 3)
			defer runtime.KeepAlive(bs)
			h := dashboard.New(reg, dashboard.Interval(50*time.Millisecond))
			ts := review46Server(t, h, h2)
			h.Close()
			start := time.Now()
			resp, err := ts.Client().Get(ts.URL + "/api/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			n := strings.Count(string(b), "data: ")
			t.Logf("%s: %d events, %d bytes, err %v, after %v", resp.Proto, n, len(b), err, time.Since(start))
			if n != 1 || err != nil || time.Since(start) > time.Second {
				t.Errorf("want one event and a clean end within 1 s")
			}
			// the page and the API as before, on the same connection
			for _, p := range []string{"/api/state", "/"} {
				resp, err := ts.Client().Get(ts.URL + p)
				if err != nil || resp.StatusCode != 200 {
					t.Errorf("%s after Close: %v %v", p, err, resp)
					continue
				}
				resp.Body.Close()
			}
		})
	}
}

// A stream that is reading normally when Close comes: ends with a clean end
// of its body (a browser's EventSource would see an error otherwise)?
func TestReview46_CloseEndsReadingStreamCleanly(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			reg, bs := review46Registry(t, 3)
			defer runtime.KeepAlive(bs)
			h := dashboard.New(reg, dashboard.Interval(20*time.Millisecond))
			ts := review46Server(t, h, h2)
			resp, err := ts.Client().Get(ts.URL + "/api/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Millisecond)
			h.Close()
			_, err = io.ReadAll(br)
			t.Logf("%s: the body ended with %v", resp.Proto, err)
			if err != nil {
				t.Errorf("a reading client's stream did not end cleanly at Close: %v", err)
			}
		})
	}
}

// Many streams come and go while Close runs: no race, no leak, every stream
// ends.
func TestReview46_CloseChurn(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			reg, bs := review46Registry(t, 20)
			defer runtime.KeepAlive(bs)
			h := dashboard.New(reg, dashboard.Interval(5*time.Millisecond))
			tr := &review46Tracked{h: h, returns: make(chan time.Time, 1024)}
			ts := review46Server(t, tr, h2)
			c := ts.Client()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for i := 0; i < 24; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
						req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/events", nil)
						resp, err := c.Do(req)
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						cancel()
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			h.Close()
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()
			deadline := time.Now().Add(3 * time.Second)
			for tr.active.Load() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if tr.active.Load() != 0 {
				t.Errorf("%d streams still served", tr.active.Load())
			}
		})
	}
}
