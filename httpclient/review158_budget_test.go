package httpclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Each hop's deadline comes at or after its caller's (rounded up), and not
// later by the time its caller spent dialing: a chain of 3 hops whose
// dials each take 40 ms, over HTTP/1.1 and HTTP/2.
func TestReview158_ChainDeadlinesWithSlowDials(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "h1"
		if h2 {
			name = "h2"
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[int]time.Time{}
			slowDial := func(rt http.RoundTripper) http.RoundTripper {
				tr := rt.(*http.Transport)
				tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					time.Sleep(40 * time.Millisecond)
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}
				return tr
			}
			var next *httptest.Server
			var nextRT http.RoundTripper
			for hop := 3; hop >= 1; hop-- {
				hop := hop
				var c *httpclient.Client
				if next != nil {
					c = httpclient.New(httpclient.Base(slowDial(nextRT)), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))))
				}
				target := next
				srv, rt := review158Server(t, deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					dl, ok := r.Context().Deadline()
					if !ok {
						t.Errorf("hop %d: no deadline", hop)
						return
					}
					mu.Lock()
					seen[hop] = dl
					mu.Unlock()
					if c != nil {
						if err := c.GetJSON(r.Context(), target.URL, nil); err != nil {
							t.Errorf("hop %d: %v", hop, err)
						}
					}
					_, _ = w.Write([]byte("{}"))
				})), h2)
				next, nextRT = srv, rt
			}
			a := httpclient.New(httpclient.Base(slowDial(nextRT)))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			first, _ := ctx.Deadline()
			if err := a.GetJSON(ctx, next.URL, nil); err != nil {
				t.Fatal(err)
			}
			prev := first
			for hop := 1; hop <= 3; hop++ {
				dl := seen[hop]
				if dl.Before(prev) {
					t.Errorf("hop %d's deadline is %v before its caller's", hop, prev.Sub(dl))
				}
				if late := dl.Sub(prev); late > 15*time.Millisecond {
					t.Errorf("hop %d's deadline is %v after its caller's (its caller's dial, 40 ms, not taken off?)", hop, late)
				}
				t.Logf("hop %d: +%v over its caller, +%v over the first", hop, dl.Sub(prev), dl.Sub(first))
				prev = dl
			}
		})
	}
}

// review158Auth is a base as oauth2.Transport is: it clones the request
// (its header too) to add a credential, then sends the clone on net/http.
type review158Auth struct{ next http.RoundTripper }

func (a review158Auth) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer x")
	return a.next.RoundTrip(r2)
}

// Over a base that clones the request before net/http dials (an
// oauth2.Transport, a signing transport), the budget is sent as the
// request was made (documented: the header sent is the clone's, which the
// trace cannot reach): the hop's deadline comes after its caller's, by
// the dial's time at most, never before.
func TestReview158_BudgetOnConnThroughCloningBase(t *testing.T) {
	var got time.Time
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = r.Context().Deadline()
		_, _ = w.Write([]byte("{}"))
	})))
	defer srv.Close()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		time.Sleep(60 * time.Millisecond)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := httpclient.New(httpclient.Base(review158Auth{tr}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	first, _ := ctx.Deadline()
	if err := c.GetJSON(ctx, srv.URL, nil); err != nil {
		t.Fatal(err)
	}
	late := got.Sub(first)
	t.Logf("through a cloning base the hop's deadline is %v after its caller's (the 60 ms dial not taken off)", late)
	if late < 0 || late > 60*time.Millisecond+time.Second/2 {
		t.Errorf("through a cloning base the hop's deadline is %v after its caller's: at or after it, by the dial at most", late)
	}
}
