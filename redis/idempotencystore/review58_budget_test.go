package idempotencystore_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// deadline.Middleware outermost, the idempotency middleware inside it on
// a Redis 3 ms away. A caller with 2 ms left: its budget runs out while
// the key is claimed, before the handler starts; the handler sees its
// context ended and returns without a word, having done nothing. The
// caller's retry of the key, with time enough, then gets...?
func TestReview58BudgetSpentInTheClaim(t *testing.T) {
	srv := r58Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	p.Delay(1500 * time.Microsecond)
	var runs, committed atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.Context().Err() != nil {
			return // nothing done
		}
		committed.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.Middleware(idempotencystore.New(r58Client(t, p.Addr()), "r58b:"), idempotency.SharedKeys())
	u, _ := r58Serve(t, deadline.Middleware(mw(h)))
	post := func(budget string) int {
		req, _ := http.NewRequest(http.MethodPost, u, nil)
		req.Header.Set("Idempotency-Key", "budget")
		req.Header.Set(deadline.Header, budget)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := post("2")
	time.Sleep(10 * time.Millisecond)
	second := post("5000")
	t.Logf("first (2 ms) %d, retry (5 s) %d; handler called %d, committed %d", first, second, runs.Load(), committed.Load())
	if committed.Load() == 0 && second != http.StatusCreated {
		t.Errorf("nothing was ever done under the key, yet its retry with time enough got %d (and will for the TTL, 24 h)", second)
	}
	_ = context.Background
}
