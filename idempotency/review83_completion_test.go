package idempotency_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

func TestReview83CompletionBounds(t *testing.T) {
	ctx := context.Background()
	g := idempotency.NewGuard(idempotency.NewMemoryStore(0), idempotency.MaxResponse(10))
	c, _, err := g.Begin(ctx, "s", "k", "fp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx)
	h := http.Header{"A": {"1"}}
	for _, n := range []int{0, 9, 10, 11} {
		r := c.Completion(idempotency.Record{Status: 201, Header: h, Body: make([]byte, n), Incomplete: n == 9, Fingerprint: "evil", Token: "evil", Done: false})
		if r.Fingerprint != "fp" || r.Token != c.Record.Token || !r.Done || r.Status != 201 || r.Header.Get("A") != "1" || r.Incomplete != (n == 9) {
			t.Errorf("n=%d: %+v", n, r)
		}
		if (n > 10) != r.Truncated || (n > 10 && r.Body != nil) || (n <= 10 && len(r.Body) != n) {
			t.Errorf("n=%d truncated=%v body=%d", n, r.Truncated, len(r.Body))
		}
	}
	// Truncated given with a body within the limit: carried as given.
	r := c.Completion(idempotency.Record{Body: []byte("abc"), Truncated: true})
	assert.True(t, r.Truncated, "Truncated carried as given")
	// concurrency
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Completion(idempotency.Record{Body: make([]byte, i%20), Header: h})
		}()
	}
	wg.Wait()
	// A foreign claim: made by another guard, with its own limit.
	g2 := idempotency.NewGuard(idempotency.NewMemoryStore(0), idempotency.MaxResponse(1000))
	c2, _, _ := g2.Begin(ctx, "s", "k", "fp")
	defer c2.Release(ctx)
	if r := c2.Completion(idempotency.Record{Body: make([]byte, 11)}); r.Truncated {
		t.Errorf("foreign claim used the other guard's limit")
	}
}

// A Claim that no guard made keeps its body whole, as Completion's doc
// says: it has no MaxResponse.
func TestReview83CompletionZeroClaimKeepsTheBody(t *testing.T) {
	var zero idempotency.Claim
	r := zero.Completion(idempotency.Record{Status: 200, Body: make([]byte, 2<<20)})
	assert.False(t, r.Truncated)
	assert.Len(t, r.Body, 2<<20)
	assert.True(t, r.Done)
}
