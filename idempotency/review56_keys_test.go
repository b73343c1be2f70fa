package idempotency_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

type r56Store struct {
	idempotency.Store
	mu   sync.Mutex
	keys []string
}

func (s *r56Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
	return s.Store.Begin(ctx, key, claim, lease)
}

// r56Raw sends a POST with the raw header lines and returns status, body and replayed.
func r56Raw(t *testing.T, addr string, lines ...string) (int, string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	b.WriteString("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n")
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	_, _ = c.Write([]byte(b.String()))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", lines, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get(idempotency.ReplayedHeader) == "true"
}

func r56Server(t *testing.T, store idempotency.Store) (*httptest.Server, *atomic.Int64) {
	var runs atomic.Int64
	srv := httptest.NewServer(idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.WriteHeader(201)
			fmt.Fprintf(w, "run%d", n)
		})))
	t.Cleanup(srv.Close)
	return srv, &runs
}

func TestReview56HostileKeysRefused(t *testing.T) {
	st := &r56Store{Store: idempotency.NewMemoryStore(0)}
	srv, runs := r56Server(t, st)
	addr := srv.Listener.Addr().String()
	refused := [][]string{
		{"Idempotency-Key:"},
		{"Idempotency-Key:    "},
		{"Idempotency-Key: \"\""},
		{"Idempotency-Key: a\x00b"},
		{"Idempotency-Key: a\x01b"},
		{"Idempotency-Key: a\x7fb"},
		{"Idempotency-Key: a\x1bb"},
		{"Idempotency-Key: caf\xc3\xa9"},
		{"Idempotency-Key: \xff"},
		{"Idempotency-Key: \"caf\xc3\xa9\""},
		{"Idempotency-Key: a b"},
		{"Idempotency-Key: a\tb"},
		{"Idempotency-Key: \"a\tb\""},
		{"Idempotency-Key: \"a"},
		{"Idempotency-Key: \"a\\\""},
		{"Idempotency-Key: \"\\n\""},
		{"Idempotency-Key: a\"b"},
		{"Idempotency-Key: a\\b"},
		{"Idempotency-Key: " + strings.Repeat("k", 256)},
		{"Idempotency-Key: \"" + strings.Repeat("k", 256) + "\""},
		{"Idempotency-Key: " + strings.Repeat("k", 100000)},
		{"Idempotency-Key: a", "Idempotency-Key: a"},
		{"Idempotency-Key: a", "idempotency-key: b"},
		{"Idempotency-Key: \"a\", \"b\""},
		{"Idempotency-Key: a, a"},
		{"Idempotency-Key: a", "Idempotency-Key:"},
	}
	for _, lines := range refused {
		code, body, _ := r56Raw(t, addr, lines...)
		if code != 400 && code != 431 {
			t.Errorf("%q: %d %s, want 400", lines, code, body)
		}
	}
	if runs.Load() != 0 || len(st.keys) != 0 {
		t.Errorf("refused keys ran %d times, reached the store %q", runs.Load(), st.keys)
	}
}

func r56SfQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// R56Keys are distinct parsed keys, and raw forms of each.
func r56Keys() [][]string {
	long := strings.Repeat("Z", 255)
	return [][]string{
		{"a", `"a"`, ` a `, "\ta"},
		{"A", `"A"`},
		{`"a b"`},
		{`" "`},
		{`"  "`},
		{`"\\"`},
		{`"\""`},
		{`"\"a\""`},
		{"a,b"},
		{`"a, b"`},
		{"{tag}x"},
		{"{tag}y"},
		{"%_*?[]"},
		{`"'; DROP TABLE idem; --"`},
		{long, r56SfQuote(long)},
		{r56SfQuote(strings.Repeat(`\`, 255))},
		{"a:b"},
		{"a:B"},
	}
}

func TestReview56DistinctKeysDistinctRecords(t *testing.T) {
	st := &r56Store{Store: idempotency.NewMemoryStore(0)}
	srv, runs := r56Server(t, st)
	r56Distinct(t, srv.Listener.Addr().String(), runs)
}

func r56Distinct(t *testing.T, addr string, runs *atomic.Int64) {
	seen := map[string]int{}
	for i, forms := range r56Keys() {
		var first string
		for j, raw := range forms {
			for rep := 0; rep < 2; rep++ {
				code, body, replayed := r56Raw(t, addr, "Idempotency-Key: "+raw)
				if code != 201 {
					t.Errorf("key %d form %q: %d %s", i, raw, code, body)
					continue
				}
				if j == 0 && rep == 0 {
					first = body
					if replayed {
						t.Errorf("key %d %q: first request replayed %s (collides with key %d)", i, raw, body, seen[body])
					}
					if k, dup := seen[body]; dup {
						t.Errorf("key %d %q shares record with key %d", i, raw, k)
					}
					seen[body] = i
					continue
				}
				if !replayed || body != first {
					t.Errorf("key %d form %q rep %d: %s replayed=%v, want replay of %s", i, raw, rep, body, replayed, first)
				}
			}
		}
	}
	if int(runs.Load()) != len(r56Keys()) {
		t.Errorf("runs %d, want %d", runs.Load(), len(r56Keys()))
	}
}
