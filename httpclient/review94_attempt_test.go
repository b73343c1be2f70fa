package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Every attempt and hedge says what it is, and the hop reads it back.
func TestReview94_AttemptHeadersWithHedges(t *testing.T) {
	review51Leak(t)
	var mu sync.Mutex
	var got []string
	s := httptest.NewServer(retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := retrysignal.FromContext(r.Context())
		mu.Lock()
		if ok {
			got = append(got, a.String())
		} else {
			got = append(got, "unread:"+r.Header.Get(retrysignal.AttemptHeader))
		}
		mu.Unlock()
		time.Sleep(40 * time.Millisecond)
		w.WriteHeader(503)
	})))
	t.Cleanup(s.Close)
	c := httpclient.New(httpclient.WithPipeline(review94Hedged(3, 15*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = review94Get(ctx, c, s.URL)
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(got)
	t.Logf("%q", got)
	want := map[string]bool{"1/3": true, "1/3; hedge": true, "2/3": true, "2/3; hedge": true, "3/3": true, "3/3; hedge": true}
	for _, g := range got {
		if !want[g] {
			t.Errorf("unexpected attempt %q", g)
		}
	}
}
