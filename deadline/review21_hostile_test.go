package deadline_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func TestReview21ParseHostile(t *testing.T) {
	bad := []string{"", " ", "-1", "+5", "1e3", "0x10", "5,6", "5, 6", "1000000000", "٣", "５", "5ms", "5.0", "\x005", "5\r\n", "9999999999"}
	for _, v := range bad {
		_, ok := deadline.Parse(v)
		assert.False(t, ok, "%q", v)
	}
	for v, want := range map[string]time.Duration{"0": 0, " 5\t": 5 * time.Millisecond, "000000001": time.Millisecond, "999999999": deadline.MaxBudget} {
		d, ok := deadline.Parse(v)
		assert.True(t, ok, "%q", v)
		assert.Equal(t, want, d, "%q", v)
	}
}

func TestReview21InjectClockEdges(t *testing.T) {
	h := http.Header{}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, math.MaxInt64))
	defer cancel()
	require.True(t, deadline.Inject(ctx, h))
	assert.Equal(t, "999999999", h.Get(deadline.Header))
	ctx2, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, math.MinInt64))
	defer cancel2()
	require.True(t, deadline.Inject(ctx2, h))
	assert.Equal(t, "0", h.Get(deadline.Header))
	ctx3, cancel3 := context.WithTimeout(context.Background(), time.Duration(math.MaxInt64))
	defer cancel3()
	require.True(t, deadline.Inject(ctx3, h))
	assert.Equal(t, "999999999", h.Get(deadline.Header))
	// a non-canonical key the caller set by hand, with no deadline
	h2 := http.Header{"request-timeout-ms": {"5"}}
	deadline.Inject(context.Background(), h2)
	t.Logf("after Inject without deadline: %v", h2)
}

// Raw requests from a hostile client: the middleware must never shorten
// the budget for anything but one well-formed value, and never panic.
func TestReview21MiddlewareRawHostileHeaders(t *testing.T) {
	type seen struct {
		has  bool
		left time.Duration
	}
	var mu sync.Mutex
	var last seen
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		mu.Lock()
		last = seen{ok, time.Until(d)}
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	send := func(headers string) (int, seen) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", headers)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		s := last
		last = seen{}
		return resp.StatusCode, s
	}
	for _, hs := range []string{
		"Request-Timeout-Ms: 5\r\nRequest-Timeout-Ms: 5\r\n",
		"Request-Timeout-Ms: 5\r\nrequest-timeout-ms: 7\r\n",
		"Request-Timeout-Ms: 5, 7\r\n",
		"Request-Timeout-Ms: -5\r\n",
		"Request-Timeout-Ms: 99999999999999999999\r\n",
		"Request-Timeout-Ms:\r\n",
	} {
		code, s := send(hs)
		if code == http.StatusOK {
			assert.False(t, s.has, "%q gave a deadline of %v", hs, s.left)
		}
	}
	code, s := send("Request-Timeout-Ms: \t 2000 \t\r\n")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, s.has)
	assert.InDelta(t, 2*time.Second, s.left, float64(200*time.Millisecond))
}

// A chain of four real services, each behind deadline.Middleware and
// retrysignal.Middleware, calling the next through httpclient: each hop
// sees a budget no longer than its caller's, and its own attempt number,
// not a forwarded one (each hop forwards its whole inbound header).
func TestReview21FourHopChainBudgetsShrink(t *testing.T) {
	type hop struct {
		budget  int
		attempt string
	}
	var mu sync.Mutex
	seenBy := map[string]hop{}
	record := func(name string, r *http.Request) {
		v, _ := strconv.Atoi(r.Header.Get(deadline.Header))
		if dl, ok := r.Context().Deadline(); ok { // behind deadline.Middleware, which takes the header off
			v = int((time.Until(dl) + time.Millisecond - 1) / time.Millisecond)
		}
		mu.Lock()
		seenBy[name] = hop{v, r.Header.Get(retrysignal.AttemptHeader)}
		mu.Unlock()
	}
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record("D", r)
		_, _ = io.WriteString(w, `"d"`)
	}))
	defer d.Close()
	mk := func(name, next string) *httptest.Server {
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))))))}
		return httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
			record(name, r)
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, next, nil)
			req.Header = r.Header.Clone() // forwards everything it got
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, _ = io.Copy(w, resp.Body)
			return nil
		}))))
	}
	c := mk("C", d.URL)
	defer c.Close()
	b := mk("B", c.URL)
	defer b.Close()
	a := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	)))
	var out string
	require.NoError(t, a.GetJSON(context.Background(), b.URL, &out, httpclient.Header(deadline.Header, "1"), httpclient.Header(retrysignal.AttemptHeader, "9/9")))
	t.Logf("seen: %+v", seenBy)
	assert.LessOrEqual(t, seenBy["B"].budget, 5000)
	assert.Greater(t, seenBy["B"].budget, 4000)
	assert.LessOrEqual(t, seenBy["C"].budget, seenBy["B"].budget)
	assert.LessOrEqual(t, seenBy["D"].budget, seenBy["C"].budget)
	assert.Equal(t, "1/3", seenBy["B"].attempt)
	assert.Equal(t, "1/2", seenBy["C"].attempt)
	assert.Equal(t, "1/2", seenBy["D"].attempt)
}
