package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// chiLike is a logging middleware's writer as chi's
// middleware.WrapResponseWriter is: its ReadFrom writes the header (200)
// before it hands the copy to the server's writer.
type chiLike struct {
	http.ResponseWriter
	wrote bool
}

func (w *chiLike) WriteHeader(s int) {
	if !w.wrote {
		w.wrote = true
		w.ResponseWriter.WriteHeader(s)
	}
}
func (w *chiLike) Write(p []byte) (int, error) { w.WriteHeader(200); return w.ResponseWriter.Write(p) }
func (w *chiLike) ReadFrom(r io.Reader) (int64, error) {
	w.WriteHeader(200) // maybeWriteHeader
	return w.ResponseWriter.(io.ReaderFrom).ReadFrom(r)
}

type failAtOnce struct{}

func (failAtOnce) Read([]byte) (int, error) { return 0, errors.New("dependency body reset") }

// A copy that wrote no byte but whose writer sent the 200 header: the error
// must not be written as a problem document into the 200 response.
func TestReview128ReadFromHeaderWritten(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, err := io.Copy(w, failAtOnce{})
		return resilience.Terminal(err)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&chiLike{ResponseWriter: w}, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("status %d content-type %q body %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	if resp.StatusCode == 200 && strings.Contains(string(b), `"status":`) {
		t.Fatalf("a 200 (%s) whose body is the problem document of an error: %q", resp.Header.Get("Content-Type"), b)
	}
}
