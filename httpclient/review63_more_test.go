package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A trusted dependency that puts No-Retry on a 200: a success all the same.
func TestReview63_SignalOnSuccess(t *testing.T) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(retrysignal.NoRetryHeader, "1")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(d.Close)
	top := r63Proxy(t, r63Hop(t, d.URL, nil).URL).URL
	s, h := r63User(t, top)
	t.Logf("status %d No-Retry %q", s, h.Get(retrysignal.NoRetryHeader))
	if s != 200 {
		t.Fatalf("status %d", s)
	}
}

// Short caller deadlines through a chain to a healthy, slow dependency
// must not open the breakers; a later call with time must complete.
func TestReview63_ShortDeadlinesDoNotOpenBreakers(t *testing.T) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(150 * time.Millisecond):
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(d.Close)
	bB := breaker.New("b->d", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(10*time.Second))
	bA := breaker.New("a->b", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(10*time.Second))
	b := r63Hop(t, d.URL, bB)
	a := r63Hop(t, b.URL, bA)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
			req.Header.Set("Request-Timeout-Ms", "40")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	t.Logf("breaker a->b %v %+v, b->d %v %+v", bA.State(), bA.Counts(), bB.State(), bB.Counts())
	s, _ := r63User(t, a.URL)
	if s != 200 {
		t.Errorf("a call with time failed: %d (a->b %v, b->d %v)", s, bA.State(), bB.State())
	}
}
