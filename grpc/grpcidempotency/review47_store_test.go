package grpcidempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A handler slower than the lease, on one replica; repeats on another,
// sharing the store, all the while.
func TestReview47HandlerOutlivesTheLease(t *testing.T) {
	shared := idempotency.NewMemoryStore(0)
	h := func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		time.Sleep(time.Second)
		return wrapperspb.String("slow"), nil
	}
	var ccs []*grpc.ClientConn
	var srvs []*r47Server
	for range 2 {
		g := idempotency.NewGuard(shared, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond))
		s, cc := r47Idem(t, h, g)
		ccs, srvs = append(ccs, cc), append(srvs, s)
	}
	done := make(chan r47Answer)
	go func() { done <- r47Call(context.Background(), ccs[0], r47Do, "L", "x") }()
	time.Sleep(20 * time.Millisecond)
	aborted := 0
	for end := time.Now().Add(900 * time.Millisecond); time.Now().Before(end); time.Sleep(30 * time.Millisecond) {
		a := r47Call(context.Background(), ccs[1], r47Do, "L", "x")
		if status.Code(a.err) != codes.Aborted {
			t.Fatalf("repeat during the run: %v", a.err)
		}
		aborted++
	}
	first := <-done
	a := r47Call(context.Background(), ccs[1], r47Do, "L", "x")
	if first.err != nil || a.err != nil || a.resp.GetValue() != "slow" || srvs[0].runs.Load()+srvs[1].runs.Load() != 1 {
		t.Errorf("first %v, after %v %q, runs %d+%d", first.err, a.err, a.resp.GetValue(), srvs[0].runs.Load(), srvs[1].runs.Load())
	}
}

// The store refuses claims: UNAVAILABLE with a pushback of 1 s, then,
// after FailOpenAfter, calls run. How long until they do?
func TestReview47FailOpenBound(t *testing.T) {
	store := newR47Store()
	store.failBegin.Store(true)
	g := idempotency.NewGuard(store, idempotency.FailOpenAfter(300*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond), idempotency.Lease(time.Second))
	_, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		return wrapperspb.String("ok"), nil
	}, g)
	start := time.Now()
	var firstOK time.Duration
	refused := 0
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		a := r47Call(context.Background(), cc, r47Do, "f"+string(rune('a'+i%26))+time.Now().Format("150405.000000"), "x")
		if a.err == nil {
			firstOK = time.Since(start)
			break
		}
		if status.Code(a.err) != codes.Unavailable || a.trailer.Get("grpc-retry-pushback-ms")[0] != "1000" {
			t.Fatalf("refusal: %v %v", a.err, a.trailer)
		}
		refused++
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("refused %d calls, first ran after %v", refused, firstOK)
	if firstOK == 0 || firstOK > 600*time.Millisecond {
		t.Errorf("failed open after %v (FailOpenAfter 300 ms)", firstOK)
	}
}

var _ atomic.Int64
var _ = grpcidempotency.ReplayedKey

func protoreflectString(s string) protoreflect.Value { return protoreflect.ValueOfString(s) }
