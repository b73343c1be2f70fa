package httpclient_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// Expect: 100-continue; the first answer a 503 that reads nothing, then
// an echo. Over HTTP/1.1 and HTTP/2, body of known length without GetBody,
// with GetBody, and of unknown length.
func TestReview113_ExpectContinueRetry(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, kind := range []string{"known", "getbody", "unknown"} {
			name := kind
			if h2 {
				name += "/h2"
			}
			t.Run(name, func(t *testing.T) {
				var n atomic.Int32
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						w.Header().Set("Retry-After", "0")
						w.WriteHeader(503)
						return
					}
					b, _ := io.ReadAll(r.Body)
					w.Write(b)
				}))
				srv.EnableHTTP2 = h2
				if h2 {
					srv.StartTLS()
				} else {
					srv.Start()
				}
				defer srv.Close()
				base := srv.Client().Transport.(*http.Transport).Clone()
				base.ExpectContinueTimeout = 2e9
				if h2 {
					base.ForceAttemptHTTP2 = true
					base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
				}
				rt := httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)), httpclient.Base(base))
				payload := strings.Repeat("abcdefgh", 8<<10)
				var body io.Reader
				switch kind {
				case "known":
					body = io.LimitReader(strings.NewReader(payload), int64(len(payload)))
				case "getbody":
					body = strings.NewReader(payload)
				case "unknown":
					body = io.MultiReader(strings.NewReader(payload))
				}
				req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
				if kind == "known" {
					req.ContentLength = int64(len(payload))
				}
				req.Header.Set("Expect", "100-continue")
				resp, err := (&http.Client{Transport: rt}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.Equal(got, []byte(payload)) {
					t.Fatalf("status %d, %d bytes of %d (attempts %d)", resp.StatusCode, len(got), len(payload), n.Load())
				}
			})
		}
	}
}
