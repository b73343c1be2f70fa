package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// review108: three real hops behind deadline.Middleware, each calling
// the next through httpclient's Transport. Each hop's deadline must come
// no earlier than its caller's (rounded up) and no later than its
// caller's plus 1 ms plus the request's time in transit (from the
// Transport setting the header, at GotConn, to the Middleware).
func TestReview108ThreeHopChainBound(t *testing.T) {
	type hop struct {
		deadline time.Time
		entered  time.Time
	}
	var mu sync.Mutex
	hops := make([]hop, 4)
	gotConn := make([]time.Time, 4)
	tr := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New()))
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	var urls [4]string
	record := func(i int, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := time.Now()
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hopKey{}, now)))
		})
	}
	mk := func(i int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			dl, ok := r.Context().Deadline()
			mu.Lock()
			hops[i] = hop{deadline: dl, entered: r.Context().Value(hopKey{}).(time.Time)}
			mu.Unlock()
			if !ok {
				t.Errorf("hop %d: no deadline", i)
			}
			if i == 3 {
				<-r.Context().Done()
				w.WriteHeader(http.StatusGatewayTimeout)
				return
			}
			req, _ := http.NewRequestWithContext(traced(r.Context(), i, &mu, gotConn), http.MethodGet, urls[i+1], nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	for i := 3; i >= 1; i-- {
		// record wraps Middleware: its time is when the request arrived,
		// before Middleware set the deadline.
		srv := httptest.NewServer(record(i, deadline.Middleware(mk(i))))
		defer srv.Close()
		urls[i] = srv.URL
	}
	// slack: the clock reads between the Transport's header and the
	// GotConn hook, and between record and Middleware, which a loaded
	// 2-core machine may preempt.
	const slack = 2 * time.Millisecond
	for run := 0; run < 5; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		dl0, _ := ctx.Deadline()
		req, _ := http.NewRequestWithContext(traced(ctx, 0, &mu, gotConn), http.MethodGet, urls[1], nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		time.Sleep(50 * time.Millisecond) // let the hops end
		mu.Lock()
		prev := dl0
		for i := 1; i <= 3; i++ {
			h := hops[i]
			transit := h.entered.Sub(gotConn[i-1])
			if h.deadline.Before(prev) {
				t.Errorf("run %d hop %d: deadline %v before its caller's", run, i, prev.Sub(h.deadline))
			}
			if late := h.deadline.Sub(prev); late > time.Millisecond+transit+slack {
				t.Errorf("run %d hop %d: deadline %v after its caller's, more than 1 ms + transit %v", run, i, late, transit)
			}
			prev = h.deadline
		}
		if total := hops[3].deadline.Sub(dl0); total > 3*time.Millisecond+hops[3].entered.Sub(gotConn[2])+hops[2].entered.Sub(gotConn[1])+hops[1].entered.Sub(gotConn[0])+3*slack {
			t.Errorf("run %d: the last hop's deadline %v after the first caller's", run, total)
		}
		mu.Unlock()
	}
}

type hopKey struct{}

func traced(ctx context.Context, i int, mu *sync.Mutex, gotConn []time.Time) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		mu.Lock()
		gotConn[i] = time.Now()
		mu.Unlock()
	}})
}
