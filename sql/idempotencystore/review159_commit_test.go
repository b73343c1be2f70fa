package idempotencystore_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// r159Proxy forwards TCP to a server; armed, it drops the next answer
// from the server and cuts the connection: a commit that the server made
// and whose answer was lost (a connection reset at the worst moment).
type r159Proxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	match  atomic.Value // []byte: armed, only an answer that holds it is dropped
	cut    atomic.Int64 // answers dropped
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func r159NewProxy(t *testing.T, target string) *r159Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &r159Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(u, c); u.Close(); c.Close() }()
			go func() {
				defer p.wg.Done()
				defer c.Close()
				defer u.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						m, _ := p.match.Load().([]byte)
						if (len(m) == 0 || bytes.Contains(buf[:n], m)) && p.armed.CompareAndSwap(true, false) {
							p.cut.Add(1)
							return // the answer is lost, the connection cut
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *r159Proxy) addr() string { return p.ln.Addr().String() }

// TestReview159_CommitAnswerLostIsReplayedNotRunAgain: the package's
// promise: "A crash after the commit leaves both, and a retry gets the
// replay". The handler's COMMIT reaches PostgreSQL and commits, and its
// answer is lost (the connection reset). The handler does as CompleteTx
// says (the commit failed: c.Abandon(), an error answer). The key must
// keep the committed record: a retry, to this replica or another, gets
// the replay of 201, and the effect stays once.
func TestReview159_CommitAnswerLostIsReplayedNotRunAgain(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the proxy and the server are gone
	s := startPostgres(t)
	storeDB := r159Open(t, s)
	st := idempotencystore.New(storeDB, "r159_commit")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := storeDB.Exec(`CREATE TABLE r159_effects (id serial PRIMARY KEY, k text)`); err != nil {
		t.Fatal(err)
	}
	p := r159NewProxy(t, "127.0.0.1:"+s.port)
	hdb, err := sql.Open("pgx", "postgres://postgres@"+p.addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer hdb.Close()

	var commitErrs atomic.Int64
	cutNext := atomic.Bool{}
	handler := func(w http.ResponseWriter, r *http.Request) {
		c := idempotency.FromContext(r.Context())
		if c == nil {
			http.Error(w, "no claim", 500)
			return
		}
		ctx, cancel := c.WithLeaseDeadline(r.Context())
		defer cancel()
		tx, err := hdb.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, err.Error(), 503)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.ExecContext(ctx, `INSERT INTO r159_effects (k) VALUES ($1)`, key); err != nil {
			tx.Rollback()
			http.Error(w, err.Error(), 503)
			return
		}
		h := http.Header{"Content-Type": {"text/plain"}, "X-Order": {"o-1"}}
		if err := st.CompleteTx(ctx, tx, c, http.StatusCreated, h, []byte("created "+key)); err != nil {
			tx.Rollback()
			c.Abandon()
			http.Error(w, err.Error(), 500)
			return
		}
		if cutNext.Load() {
			p.armed.Store(true)
		}
		if err := tx.Commit(); err != nil {
			commitErrs.Add(1)
			c.Abandon() // as CompleteTx says: the commit failed
			http.Error(w, "commit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Order", "o-1")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created "+key)
	}
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(3 * time.Second), idempotency.StoreTimeout(300 * time.Millisecond)}
	a := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer a.Close()
	b := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer b.Close()

	post := func(url, key string) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	effects := func(key string) int {
		var n int
		if err := storeDB.QueryRow(`SELECT count(*) FROM r159_effects WHERE k = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for i, key := range []string{"lost-1", "lost-2", "lost-3"} {
		cutNext.Store(true)
		code, body, _ := post(a.URL, key)
		cutNext.Store(false)
		if commitErrs.Load() != int64(i+1) || p.cut.Load() != int64(i+1) {
			t.Fatalf("premise: the commit's answer was not lost (%d commit errors, %d cut): %d %s", commitErrs.Load(), p.cut.Load(), code, body)
		}
		if n := effects(key); n != 1 {
			t.Fatalf("premise: the commit did not happen (%d effects)", n)
		}
		for _, url := range []string{a.URL, b.URL} {
			code, body, h := postAgain(post, url, key)
			if code != http.StatusCreated || body != "created "+key || h.Get("X-Order") != "o-1" || h.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s: retry after a commit whose answer was lost: %d %q %v, want the replay of 201", key, code, body, h)
			}
		}
		if n := effects(key); n != 1 {
			t.Errorf("%s: effect ran %d times", key, n)
		}
	}
	a.Close()
	b.Close()
	hdb.Close()
	storeDB.Close()
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond)
}

// postAgain posts as a client that honours 409's Retry-After does, for a
// few seconds: a replica still freeing the claim of a request whose
// commit failed (its first try at the store can time out on a loaded
// machine: ci158) answers a repeat as in progress until it is done.
func postAgain(post func(url, key string) (int, string, http.Header), url, key string) (int, string, http.Header) {
	end := time.Now().Add(5 * time.Second)
	for {
		code, body, h := post(url, key)
		if code != http.StatusConflict || h.Get("Retry-After") == "" || time.Now().After(end) {
			return code, body, h
		}
		time.Sleep(200 * time.Millisecond)
	}
}
