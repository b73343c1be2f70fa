package idempotencystore_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// Redis frozen (SIGSTOP) or killed (SIGKILL) as the handler ends: the
// client gets the answer whole within about one StoreTimeout, over HTTP/1
// and HTTP/2, and once Redis is back a retry gets an identical replay;
// the handler ran once.
func TestReview28StoreFaultAtHandlerEnd(t *testing.T) {
	for _, fault := range []string{"freeze", "kill"} {
		for _, h2 := range []bool{false, true} {
			name := fault + "/HTTP1"
			if h2 {
				name = fault + "/HTTP2"
			}
			t.Run(name, func(t *testing.T) {
				srvRedis := redistest.Start(t)
				store := idempotencystore.New(srvRedis.Client(), "r28:")
				const storeTO = 200 * time.Millisecond
				var runs atomic.Int32
				body := `{"order":` + strings.Repeat("7", 1500) + `}` // within what net/http buffers: held, and sent early
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("X-Order", "7")
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, body)
					if fault == "freeze" {
						srvRedis.Freeze()
					} else {
						srvRedis.Kill()
					}
				})
				mw := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.StoreTimeout(storeTO), idempotency.Lease(4*time.Second))
				srv := httptest.NewUnstartedServer(mw(h))
				if h2 {
					srv.EnableHTTP2 = true
					srv.StartTLS()
				} else {
					srv.Start()
				}
				defer srv.Close()
				c := srv.Client()
				c.Timeout = 10 * time.Second
				post := func() (*http.Response, []byte, time.Duration) {
					req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"sku":1}`))
					req.Header.Set(idempotency.Header, "k")
					t0 := time.Now()
					resp, err := c.Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					// read what the Content-Length declares, as a JSON client does
					b := make([]byte, max(resp.ContentLength, 0))
					if resp.ContentLength < 0 {
						b, err = io.ReadAll(resp.Body)
					} else {
						_, err = io.ReadFull(resp.Body, b)
					}
					require.NoError(t, err)
					return resp, b, time.Since(t0)
				}
				resp, b, d := post()
				t.Logf("%s: first answer %d after %v (CL %d, close %v, proto %s)", name, resp.StatusCode, d, resp.ContentLength, resp.Close, resp.Proto)
				assert.Equal(t, http.StatusCreated, resp.StatusCode)
				assert.Equal(t, body, string(b))
				assert.Less(t, d, storeTO+400*time.Millisecond, "held for one StoreTimeout at most")

				time.Sleep(300 * time.Millisecond)
				if fault == "freeze" {
					srvRedis.Thaw()
				} else {
					srvRedis.Restart()
				}
				// retry until the replay
				deadline := time.Now().Add(6 * time.Second)
				for {
					resp2, b2, _ := post()
					if resp2.StatusCode == http.StatusConflict {
						require.True(t, time.Now().Before(deadline), "still 409")
						time.Sleep(200 * time.Millisecond)
						continue
					}
					assert.Equal(t, http.StatusCreated, resp2.StatusCode)
					assert.Equal(t, "true", resp2.Header.Get(idempotency.ReplayedHeader))
					assert.Equal(t, "7", resp2.Header.Get("X-Order"))
					assert.Equal(t, resp.Header.Get("Content-Type"), resp2.Header.Get("Content-Type"))
					assert.Equal(t, body, string(b2))
					break
				}
				assert.EqualValues(t, 1, runs.Load())
			})
		}
	}
}
