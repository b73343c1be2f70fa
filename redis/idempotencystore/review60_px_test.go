package idempotencystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func TestReview60SubMillisecond(t *testing.T) {
	srv := redistest.Start(t)
	s := idempotencystore.New(srv.Client(), "r60:")
	ctx := context.Background()
	claim := idempotency.Record{Token: "t1"}
	if rec, err := s.Begin(ctx, "k", claim, 500*time.Microsecond); err != nil || rec != nil {
		t.Fatalf("Begin: %v %v", rec, err)
	}
	if err := s.Renew(ctx, "k", claim, 1500*time.Microsecond); err != nil {
		t.Logf("Renew 1.5ms: %v (claim may have expired)", err)
	}
	claim2 := idempotency.Record{Token: "t2"}
	if _, err := s.Begin(ctx, "k2", claim2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, "k2", claim2, 300*time.Microsecond); err != nil {
		t.Errorf("Renew 300µs: %v", err)
	}
	claim3 := idempotency.Record{Token: "t3"}
	if _, err := s.Begin(ctx, "k3", claim3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k3", claim3, idempotency.Record{Token: "t3", Done: true, Status: 200}, 200*time.Microsecond); err != nil {
		t.Errorf("Complete 200µs: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, _ := srv.Client().Exists(ctx, "r60:k2", "r60:k3").Result(); n != 0 {
		t.Errorf("%d keys remain after sub-ms expiry", n)
	}
}
