package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// 103 Early Hints heard by the caller's trace, response trailers, a 307
// of a PUT with a body followed with cookies set on the way, each after a
// 503: as a plain client gets them.
func TestReview113_EarlyHintsTrailersRedirectCookies(t *testing.T) {
	var n atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "1", Path: "/"})
		http.Redirect(w, r, "/end", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/end", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("s"); err != nil || c.Value != "1" {
			http.Error(w, "no cookie", 400)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "X-Done")
		w.WriteHeader(200)
		w.Write(b)
		w.Header().Set("X-Done", "yes")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Transport: httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)))}
	var hints atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == 103 {
				hints.Add(1)
			}
			return nil
		},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/start", strings.NewReader("payload"))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "payload" || resp.Trailer.Get("X-Done") != "yes" || hints.Load() != 1 {
		t.Fatalf("status %d body %q trailer %q hints %d", resp.StatusCode, b, resp.Trailer.Get("X-Done"), hints.Load())
	}
}
