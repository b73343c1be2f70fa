package idempotencystore_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

func r105Post(url, key, body string) (int, http.Header, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(body))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// A header value with obs-text (bytes 0x80 to 0xFF, RFC 9110 allows them:
// a Latin-1 file name in Content-Disposition) is sent as it is by
// net/http. Replayed from the SQL store, it must be the same bytes.
func TestReview105NonUTF8HeaderIsReplayedAsSent(t *testing.T) {
	pg := startPostgres(t)
	_, store := pg.open()
	const disp = "attachment; filename=\"caf\xe9.txt\""
	var runs atomic.Int64
	srv := httptest.NewServer(idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Disposition", disp)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "file")
		})))
	t.Cleanup(srv.Close)
	code, h, _, err := r105Post(srv.URL, "utf8-k", "x")
	if err != nil || code != http.StatusCreated || h.Get("Content-Disposition") != disp {
		t.Fatalf("first: %d %q %v", code, h.Get("Content-Disposition"), err)
	}
	code, h, _, err = r105Post(srv.URL, "utf8-k", "x")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay: %d replayed=%q Content-Disposition %q, runs %d", code, h.Get(idempotency.ReplayedHeader), h.Get("Content-Disposition"), runs.Load())
	if runs.Load() != 1 || code != http.StatusCreated {
		t.Fatalf("runs %d, code %d", runs.Load(), code)
	}
	if got := h.Get("Content-Disposition"); got != disp {
		t.Errorf("replayed Content-Disposition %q (% x), first sent %q (% x): a wrong replay", got, got, disp, disp)
	}
}

// Replays through the SQL store of a body of exactly MaxResponse and of a
// streamed (flushed) body: the same bytes as first sent.
func TestReview105BigAndStreamedBodiesReplayFromSQL(t *testing.T) {
	pg := startPostgres(t)
	_, store := pg.open()
	big := bytes.Repeat([]byte("0123456789abcdef\xff"), (1<<20)/17)
	big = append(big, bytes.Repeat([]byte{'z'}, (1<<20)-len(big))...)
	var runs atomic.Int64
	srv := httptest.NewServer(idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("X-Kind", r.URL.Query().Get("kind"))
			if r.URL.Query().Get("kind") == "big" {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(big)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 20 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
		})))
	t.Cleanup(srv.Close)
	for _, kind := range []string{"big", "stream"} {
		runs.Store(0)
		req := func() (int, http.Header, []byte) {
			rq, _ := http.NewRequest(http.MethodPost, srv.URL+"/?kind="+kind, strings.NewReader("b"))
			rq.Header.Set(idempotency.Header, "body-"+kind)
			resp, err := http.DefaultClient.Do(rq)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, b
		}
		c1, h1, b1 := req()
		c2, h2, b2 := req()
		if runs.Load() != 1 || c1 != c2 || !bytes.Equal(b1, b2) || h2.Get("X-Kind") != kind || h1.Get("Content-Type") != h2.Get("Content-Type") || h2.Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("%s: runs %d, %d/%d, bodies equal %v (%d/%d bytes), replayed %q", kind, runs.Load(), c1, c2, bytes.Equal(b1, b2), len(b1), len(b2), h2.Get(idempotency.ReplayedHeader))
		}
	}
}
