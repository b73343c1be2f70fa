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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// r12proxy forwards to target, and loses the answer to a SET ... NX
// (the server applies it, the connection closes before its answer) while
// drops > 0.
type r12proxy struct {
	l      net.Listener
	target string
	drops  atomic.Int64
	lost   atomic.Int64
	wg     sync.WaitGroup
}

func newR12Proxy(t *testing.T, target string) *r12proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &r12proxy{l: l, target: target}
	p.wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			var drop atomic.Bool
			p.wg.Go(func() {
				defer in.Close()
				defer out.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := in.Read(buf)
					if n > 0 {
						b := bytes.ToLower(buf[:n])
						if bytes.Contains(b, []byte("$3\r\nset\r\n")) && bytes.HasSuffix(b, []byte("$2\r\nnx\r\n")) && p.drops.Add(-1) >= 0 {
							drop.Store(true)
						}
						if _, err := out.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
			p.wg.Go(func() {
				defer in.Close()
				defer out.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := out.Read(buf)
					if n > 0 {
						if drop.Load() {
							p.lost.Add(1)
							return // the answer lost, the connection closed
						}
						if _, err := in.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

// TestReview12LostClaimReplyGuard: the claim's answer is lost on one
// replica; another replica gets the same key at the same time: exactly
// one run, and the replica whose answer was lost is not refused its own key.
func TestReview12LostClaimReplyGuard(t *testing.T) {
	srv := redistest.Start(t)
	px := newR12Proxy(t, srv.Addr())
	lossy := redis.NewClient(&redis.Options{Addr: px.l.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = lossy.Close() })
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	})
	mk := func(c redis.UniversalClient) *httptest.Server {
		h := idempotency.Middleware(idempotencystore.New(c, "r12:"), idempotency.SharedKeys(), idempotency.Lease(2*time.Second),
			idempotency.WithLogger(slog.New(slog.DiscardHandler)))(handler)
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s
	}
	a, b := mk(lossy), mk(srv.Client())
	do := func(url, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set(idempotency.Header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const keys = 40
	var alone409 atomic.Int64
	for i := range keys {
		key := fmt.Sprint("k", i)
		px.drops.Store(1)
		if i%2 == 0 { // alone: the lossy replica's own key
			st, _ := do(a.URL, key)
			if st == http.StatusConflict {
				alone409.Add(1)
			}
			continue
		}
		var wg sync.WaitGroup
		for _, s := range []*httptest.Server{a, b, a, b} {
			wg.Go(func() { do(s.URL, key) })
		}
		wg.Wait()
	}
	// Every key answered once done: the replay.
	bodies := map[string]string{}
	for i := range keys {
		key := fmt.Sprint("k", i)
		require.Eventually(t, func() bool {
			st, body := do(b.URL, key)
			bodies[key] = body
			return st == http.StatusCreated
		}, 5*time.Second, 20*time.Millisecond, key)
	}
	t.Logf("answers lost: %d; runs: %d for %d keys; 409 to a lone request: %d", px.lost.Load(), runs.Load(), keys, alone409.Load())
	require.EqualValues(t, keys, runs.Load())
	require.Zero(t, alone409.Load())
	_ = context.Background
}
