package retrysignal_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r129Plain hides bytes.Reader's WriteTo, so io.Copy reaches ReadFrom.
type r129Plain struct{ r io.Reader }

func (p r129Plain) Read(b []byte) (int, error) { return p.r.Read(b) }

type r129Result struct {
	status int
	cl     int64
	te     []string
	ct     string
	body   string
	hdr    http.Header
}

func r129Do(t *testing.T, h http.Handler, method string, hdr map[string]string) r129Result {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(method, srv.URL+"/f", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "multipart/byteranges; boundary=") {
		bd := strings.TrimPrefix(ct, "multipart/byteranges; boundary=")
		b = bytes.ReplaceAll(b, []byte(bd), []byte("BOUNDARY"))
		resp.Header.Set("Content-Type", "multipart/byteranges; boundary=BOUNDARY")
	}
	return r129Result{resp.StatusCode, resp.ContentLength, resp.TransferEncoding, resp.Header.Get("Content-Type"), string(b), resp.Header}
}

// r129Compare runs body both under plain net/http and under Handler.
func r129Compare(t *testing.T, name string, body func(w http.ResponseWriter, r *http.Request) error, method string, hdr map[string]string) {
	t.Helper()
	plain := r129Do(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = body(w, r) }), method, hdr)
	wrapped := r129Do(t, retrysignal.Handler(body), method, hdr)
	if plain.status != wrapped.status || plain.cl != wrapped.cl || fmt.Sprint(plain.te) != fmt.Sprint(wrapped.te) ||
		plain.ct != wrapped.ct || plain.body != wrapped.body || fmt.Sprint(plain.hdr) != fmt.Sprint(wrapped.hdr) {
		t.Errorf("%s: differs from net/http without Handler:\nplain   status=%d cl=%d te=%v ct=%q len=%d hdr=%v\nwrapped status=%d cl=%d te=%v ct=%q len=%d hdr=%v",
			name, plain.status, plain.cl, plain.te, plain.ct, len(plain.body), plain.hdr,
			wrapped.status, wrapped.cl, wrapped.te, wrapped.ct, len(wrapped.body), wrapped.hdr)
	}
}

// zeroThen returns (0, nil) zeros times, then the data.
type zeroThen struct {
	zeros int
	r     io.Reader
}

func (z *zeroThen) Read(p []byte) (int, error) {
	if z.zeros > 0 {
		z.zeros--
		return 0, nil
	}
	return z.r.Read(p)
}

// A reader that returns (0, nil) more than 100 times before its data:
// io.Copy into net/http's writer waits for it; Handler fails the request.
func TestReview129_ZeroReadsThenData(t *testing.T) {
	for _, zeros := range []int{3, 99, 100, 150} {
		r129Compare(t, fmt.Sprintf("zeros=%d", zeros), func(w http.ResponseWriter, r *http.Request) error {
			_, err := io.Copy(w, &zeroThen{zeros: zeros, r: strings.NewReader("hello world")})
			return err
		}, "GET", nil)
	}
}

// Bodies of various sizes and read shapes, framing and sniffing compared.
func TestReview129_FramingAndSniff(t *testing.T) {
	html := "<html><body>" + strings.Repeat("x", 5000)
	for _, size := range []int{0, 1, 100, 511, 512, 513, 600, 1023, 1024, 1025, 3000, 5000} {
		data := html[:size]
		r129Compare(t, fmt.Sprintf("plain size=%d", size), func(w http.ResponseWriter, r *http.Request) error {
			_, err := io.Copy(w, r129Plain{strings.NewReader(data)})
			return err
		}, "GET", nil)
		r129Compare(t, fmt.Sprintf("onebyte-first size=%d", size), func(w http.ResponseWriter, r *http.Request) error {
			_, err := io.Copy(w, r129Plain{io.MultiReader(strings.NewReader(data[:min(1, size)]), strings.NewReader(data[min(1, size):]))})
			return err
		}, "GET", nil)
	}
}

// dataEOF returns all its data with io.EOF on the first Read.
type dataErr struct {
	data string
	err  error
	done bool
}

func (d *dataErr) Read(p []byte) (int, error) {
	if d.done {
		return 0, d.err
	}
	d.done = true
	return copy(p, d.data), d.err
}

func TestReview129_DataWithErrorFirstRead(t *testing.T) {
	for _, size := range []int{1, 300, 512} {
		data := strings.Repeat("a", size)
		r129Compare(t, fmt.Sprintf("eof size=%d", size), func(w http.ResponseWriter, r *http.Request) error {
			n, err := io.Copy(w, &dataErr{data: data, err: io.EOF})
			if n != int64(size) || err != nil {
				return fmt.Errorf("n=%d err=%v", n, err)
			}
			return nil
		}, "GET", nil)
		// With another error: the data went out, the error must not be answered over it.
		r129Compare(t, fmt.Sprintf("err size=%d", size), func(w http.ResponseWriter, r *http.Request) error {
			n, err := io.Copy(w, &dataErr{data: data, err: io.ErrUnexpectedEOF})
			if n != int64(size) {
				return fmt.Errorf("n=%d err=%v", n, err)
			}
			return nil
		}, "GET", nil)
	}
}

func TestReview129_ServeContent(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	path := filepath.Join(dir, "f.bin")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	mod := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	_ = os.Chtimes(path, mod, mod)
	sc := func(w http.ResponseWriter, r *http.Request) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		http.ServeContent(w, r, "f.bin", mod, f)
		return nil
	}
	sf := func(w http.ResponseWriter, r *http.Request) error { http.ServeFile(w, r, path); return nil }
	cases := []struct {
		method string
		hdr    map[string]string
	}{
		{"GET", nil},
		{"HEAD", nil},
		{"GET", map[string]string{"Range": "bytes=0-0"}},
		{"GET", map[string]string{"Range": "bytes=100-999"}},
		{"GET", map[string]string{"Range": "bytes=0-10,600-40000"}},
		{"GET", map[string]string{"Range": "bytes=70000-"}},
		{"HEAD", map[string]string{"Range": "bytes=5-10"}},
		{"GET", map[string]string{"If-Modified-Since": mod.Format(http.TimeFormat)}},
		{"GET", map[string]string{"If-Unmodified-Since": mod.Add(-time.Hour).Format(http.TimeFormat)}},
	}
	for _, c := range cases {
		r129Compare(t, fmt.Sprintf("ServeContent %s %v", c.method, c.hdr), sc, c.method, c.hdr)
		r129Compare(t, fmt.Sprintf("ServeFile %s %v", c.method, c.hdr), sf, c.method, c.hdr)
	}
}

// rfConn records the types of readers the server hands to the
// connection's ReadFrom (where sendfile happens).
type rfConn struct {
	*net.TCPConn
	mu    *sync.Mutex
	types *[]string
}

func (c rfConn) ReadFrom(r io.Reader) (int64, error) {
	c.mu.Lock()
	t := fmt.Sprintf("%T", r)
	if lr, ok := r.(*io.LimitedReader); ok {
		t += fmt.Sprintf("{%T}", lr.R)
	}
	*c.types = append(*c.types, t)
	c.mu.Unlock()
	return c.TCPConn.ReadFrom(r)
}

type rfListener struct {
	net.Listener
	mu    sync.Mutex
	types []string
}

func (l *rfListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return rfConn{c.(*net.TCPConn), &l.mu, &l.types}, nil
}

func r129Sendfile(t *testing.T, h http.Handler, rng string) ([]string, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &rfListener{Listener: ln}
	srv := &http.Server{Handler: h}
	go srv.Serve(rl)
	defer srv.Close()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return append([]string(nil), rl.types...), len(b)
}

func TestReview129_Sendfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(path, bytes.Repeat([]byte("z"), 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]func(w http.ResponseWriter, r *http.Request) error{
		"ServeFile": func(w http.ResponseWriter, r *http.Request) error { http.ServeFile(w, r, path); return nil },
		"io.Copy(file) with Content-Length": func(w http.ResponseWriter, r *http.Request) error {
			f, _ := os.Open(path)
			defer f.Close()
			w.Header().Set("Content-Length", fmt.Sprint(4<<20))
			_, err := io.Copy(w, f)
			return err
		},
		"ReadFrom(file) with Content-Length": func(w http.ResponseWriter, r *http.Request) error {
			f, _ := os.Open(path)
			defer f.Close()
			w.Header().Set("Content-Length", fmt.Sprint(4<<20))
			_, err := w.(io.ReaderFrom).ReadFrom(f)
			return err
		},
	}
	for name, body := range bodies {
		for _, rng := range []string{"", "bytes=1000-3000000"} {
			pt, pn := r129Sendfile(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = body(w, r) }), rng)
			wt, wn := r129Sendfile(t, retrysignal.Handler(body), rng)
			if fmt.Sprint(pt) != fmt.Sprint(wt) || pn != wn {
				t.Errorf("%s range=%q: conn.ReadFrom got %v (%d bytes) without Handler, %v (%d bytes) with", name, rng, pt, pn, wt, wn)
			} else {
				t.Logf("%s range=%q: %v %d", name, rng, pt, pn)
			}
		}
	}
}

// A streaming source that has 600 bytes now and more later: without
// Handler net/http sends the header (and the first 512 bytes) once 512
// bytes came; under Handler the client waits for 512 more.
func TestReview129_HeaderLatency(t *testing.T) {
	run := func(h func(w http.ResponseWriter, r *http.Request) error, wrap bool) bool {
		pr, pw := io.Pipe()
		var hh http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = h(w, r) })
		if wrap {
			hh = retrysignal.Handler(h)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r = r.WithContext(r.Context())
			go func() { pw.Write(bytes.Repeat([]byte("e"), 600)) }()
			ctx := r.Context()
			go func() { <-ctx.Done(); pw.CloseWithError(io.ErrClosedPipe) }()
			hh.ServeHTTP(w, r.WithContext(withBody(ctx, pr)))
		}))
		defer srv.Close()
		c := srv.Client()
		c.Timeout = 1500 * time.Millisecond
		resp, err := c.Get(srv.URL)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	body := func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(w, bodyFrom(r.Context()))
		return err
	}
	for i := 0; i < 2; i++ {
		p, wr := run(body, false), run(body, true)
		if p && !wr {
			t.Errorf("run %d: headers arrived within 1.5s without Handler, not with it", i)
		}
		t.Logf("run %d: plain headers=%v wrapped headers=%v", i, p, wr)
	}
}
