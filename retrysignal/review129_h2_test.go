package retrysignal_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type r129NoRF struct{ http.ResponseWriter }

// Over HTTP/2 (no ReadFrom below) and under a middleware writer without
// ReadFrom: same bytes, same count n.
func TestReview129_H2AndNoReadFrom(t *testing.T) {
	data := strings.Repeat("0123456789", 7000)
	for _, size := range []int{1, 511, 512, 513, 5000, 70000} {
		var got []int64
		body := func(w http.ResponseWriter, r *http.Request) error {
			n, err := io.Copy(w, r129Plain{io.MultiReader(strings.NewReader(data[:1]), &zeroThen{3, strings.NewReader(data[1:size])})})
			got = append(got, n)
			return err
		}
		for _, h2 := range []bool{true, false} {
			var h http.Handler = retrysignal.Handler(body)
			if !h2 {
				inner := h
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inner.ServeHTTP(r129NoRF{w}, r) })
			}
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			srv.Close()
			if string(b) != data[:size] || got[len(got)-1] != int64(size) {
				t.Errorf("h2=%v size=%d: got %d bytes, n=%d, proto %s", h2, size, len(b), got[len(got)-1], resp.Proto)
			}
			_ = fmt.Sprint
		}
	}
}
