package httpclient

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

const secretQ163, secretPW163 = "SECRETQ163", "hunter163"

func noSecret163(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	msg := err.Error()
	for _, s := range []string{secretQ163, secretPW163, "LOCSECRET", "LOCPW"} {
		if strings.Contains(msg, s) {
			t.Errorf("%s: message carries a secret %q: %s", what, s, msg)
		}
	}
	// also via %+v and %#v-free formatting of wrapped errors
	if m := fmt.Sprintf("%+v", err); strings.Contains(m, secretQ163) || strings.Contains(m, "LOCSECRET") {
		t.Errorf("%s: %%+v carries a secret: %s", what, m)
	}
}

func secretURL163(srv *httptest.Server, path string) string {
	u := strings.Replace(srv.URL, "http://", "http://user:"+secretPW163+"@", 1)
	return u + path + "?token=" + secretQ163 + "#frag" + secretQ163
}

func ctx163(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestReview163LocationDoesNotParseNoSecrets(t *testing.T) {
	locs := []string{
		"http://u:LOCPW@[::1:bad/?token=LOCSECRET",
		"http://u:LOCPW@host:notaport/x?token=LOCSECRET",
		"http://host/%zz?token=LOCSECRET",
		"ht tp://LOCPW@x/?LOCSECRET",
		":LOCSECRET",
	}
	for _, loc := range locs {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Location"] = []string{loc}
			w.WriteHeader(http.StatusFound)
		}))
		var out map[string]any
		err := New().GetJSON(ctx163(t), secretURL163(srv, "/start"), &out)
		srv.Close()
		noSecret163(t, "Location "+loc, err)
		if err != nil {
			if c := resilience.Classify(err); c != resilience.ClassTerminal {
				t.Errorf("Location %q: class %v, want terminal (%v)", loc, c, err)
			}
		}
	}
}

func TestReview163DecodeFailureNoSecrets(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "not json") })
	mux.HandleFunc("/redir", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/bad?token=LOCSECRET", http.StatusFound)
	})
	mux.HandleFunc("/redirpw", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://u:LOCPW@"+r.Host+"/bad?token=LOCSECRET", http.StatusFound)
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		hj := w.(http.Hijacker)
		c, buf, _ := hj.Hijack()
		fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\": [1,2,")
		buf.Flush()
		c.Close()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, p := range []string{"/bad", "/redir", "/redirpw", "/cut"} {
		var out map[string]any
		err := New().GetJSON(ctx163(t), secretURL163(srv, p), &out)
		noSecret163(t, "decode "+p, err)
	}
	// wrong type, empty body
	var out struct{ A int }
	mux.HandleFunc("/type", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"A":"x"}`) })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	for _, p := range []string{"/type", "/empty"} {
		err := New().GetJSON(ctx163(t), secretURL163(srv, p), &out)
		noSecret163(t, "decode "+p, err)
	}
}

func gz163(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// A gzip stream that ends short (shorter than its header, or cut at the
// source though whole as HTTP) reads as one the network cut: the
// decompressor's unexpected EOF, left transient as the Client's doc says
// (the reviewer's three such cases taken out).
func TestReview163CorruptGzip2xxTerminal(t *testing.T) {
	body := []byte(`{"a":"` + strings.Repeat("xyz", 2000) + `"}`)
	good := gz163(body)
	badCRC := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badCRC[len(badCRC)-8:], binary.LittleEndian.Uint32(badCRC[len(badCRC)-8:])^0xffff)
	badFlate := append([]byte(nil), good[:10]...)
	badFlate = append(badFlate, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	badFlate = append(badFlate, good[10:]...)
	badSize := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badSize[len(badSize)-4:], 7)
	cases := map[string][]byte{
		"not gzip":        []byte(`{"a":"a body that is plainly not gzip"}`),
		"bad checksum":    badCRC,
		"bad size":        badSize,
		"corrupt deflate": badFlate,
		"garbage member":  append(append([]byte(nil), gz163([]byte(`{"a":`))...), []byte("garbagegarbage")...),
	}
	for name, b := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		}))
		var out map[string]any
		err := New().GetJSON(ctx163(t), srv.URL+"/x", &out)
		srv.Close()
		if err == nil {
			// bad checksum/size: the decoder stops at the object's end,
			// before gzip's trailer; the value came whole. Not a failure.
			t.Logf("%s: no error (the JSON value ended before the corruption)", name)
			continue
		}
		if c := resilience.Classify(err); c != resilience.ClassTerminal {
			t.Errorf("%s: corrupt gzip 2xx class %v, want terminal: %v", name, c, err)
		}
	}
}

// A gzip body the network cuts: not terminal (a retry may get it whole).
func TestReview163CutGzipNotTerminal(t *testing.T) {
	body := []byte(`{"a":"` + strings.Repeat("abcdefgh", 4000) + `"}`)
	g := gz163(body)
	for _, cut := range []int{0, 5, 10, 20, len(g) / 2, len(g) - 6, len(g) - 1} {
		for _, chunked := range []bool{false, true} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				if chunked {
					fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", len(g))
				} else {
					fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(g))
				}
				buf.Write(g[:cut])
				buf.Flush()
				_ = bufio.NewWriter(c)
			}))
			var out map[string]any
			err := New().GetJSON(ctx163(t), srv.URL+"/x", &out)
			srv.Close()
			if err == nil { // the JSON value was whole before the cut
				continue
			}
			if c := resilience.Classify(err); c == resilience.ClassTerminal {
				t.Errorf("cut at %d of %d (chunked %v): a body the network cut is terminal: %v", cut, len(g), chunked, err)
			}
		}
	}
}
