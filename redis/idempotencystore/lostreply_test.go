package idempotencystore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// lossyConn loses the reply to the next SET ... NX once armed: the server
// applied it, and the connection is closed before the reply (EOF), as a
// server restart, a proxy or a load balancer closing the link would do.
type lossyConn struct {
	net.Conn
	armed   *atomic.Bool
	pending bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	lb := bytes.ToLower(b)
	if c.armed.Load() && bytes.Contains(lb, []byte("\r\nset\r\n")) && bytes.Contains(lb, []byte("\r\nnx\r\n")) {
		c.pending = true
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if c.pending && c.armed.CompareAndSwap(true, false) {
		c.pending = false
		buf := make([]byte, 512)
		_, _ = c.Conn.Read(buf) // the reply, lost
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// TestALostAnswerToTheClaimDoesNotBlockTheKey: the claim's SET NX is applied
// but its reply is lost with the connection (EOF). go-redis retries the
// command (MaxRetries 3 by default) on a new connection: SET NX finds the
// key taken, by this very claim, and the store returns it as someone
// else's record in flight. The request, which would have run on a healthy
// server, gets 409, and so does every retry until the lease runs out: the
// key is held by a claim no one holds.
func TestALostAnswerToTheClaimDoesNotBlockTheKey(t *testing.T) {
	srv := redistest.Start(t)
	var armed atomic.Bool
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: conn, armed: &armed}, nil
		}})
	t.Cleanup(func() { _ = c.Close() })
	var runs atomic.Int64
	store := idempotencystore.New(c, "lost:")
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(3*time.Second),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)

	code, _, _ := post(t, s.URL, "warm") // the eviction policy read, the pool warm
	assert.Equal(t, http.StatusCreated, code)
	armed.Store(true)
	code, _, body := post(t, s.URL, "k")
	t.Logf("first: %d %s (armed still %v)", code, body, armed.Load())
	var conflicts int
	start := time.Now()
	for code == http.StatusConflict && time.Since(start) < 5*time.Second {
		conflicts++
		time.Sleep(200 * time.Millisecond)
		code, _, body = post(t, s.URL, "k")
	}
	t.Logf("then %d %s after %v and %d answers of 409; runs %d", code, body, time.Since(start), conflicts, runs.Load())
	assert.Zero(t, conflicts, "a request that never ran got 409: its own claim, whose reply was lost, was taken for another's")
}
