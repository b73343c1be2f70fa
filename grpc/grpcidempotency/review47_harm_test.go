package grpcidempotency_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A store that fails to save the answer (it failed, or froze, after the
// claim) must not make a call that the handler answered in a millisecond
// fail: the HTTP middleware sends the response after one StoreTimeout once
// a first save has failed. Here: StoreTimeout 100 ms, lease 3 s, the
// client's deadline 1 s.
func TestReview47SaveFailureHoldsTheAnswer(t *testing.T) {
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "refuses", true: "hangs"}[hang]
		t.Run(name, func(t *testing.T) {
			store := newR47Store()
			guard := idempotency.NewGuard(store, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond))
			srv := r47Start(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				store.failComplete.Store(true) // the store goes down as the handler commits
				store.hang.Store(hang)
				return wrapperspb.String("done:" + in.GetValue()), nil
			}, grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
			cc := r47Dial(t, srv.addr)

			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			a := r47Call(ctx, cc, r47Do, "k1", "x")
			took := time.Since(start)
			t.Logf("store %s: answer after %v: %v (completes tried %d)", name, took.Round(time.Millisecond), a.err, store.completes.Load())
			if a.err != nil {
				t.Errorf("a call whose handler succeeded at once failed because its answer could not be saved: %v after %v", status.Code(a.err), took.Round(time.Millisecond))
			}
			if took > 500*time.Millisecond {
				t.Errorf("the answer was held %v by a failing save (StoreTimeout 100 ms)", took.Round(time.Millisecond))
			}
			// And the client's retry.
			store.failComplete.Store(false)
			ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
			defer cancel2()
			b := r47Call(ctx2, cc, r47Do, "k1", "x")
			t.Logf("retry: %v %q", status.Code(b.err), b.resp.GetValue())
			if status.Code(b.err) == codes.Aborted {
				t.Logf("retry refused as in progress: the handler finished long ago")
			}
			time.Sleep(3500 * time.Millisecond) // let the save loop end
		})
	}
}

// How long the answer is held without a client deadline: up to the lease
// (3 s here; 30 s by default), while the HTTP middleware sends it after one
// StoreTimeout.
func TestReview47SaveFailureHoldTime(t *testing.T) {
	store := newR47Store()
	guard := idempotency.NewGuard(store, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond))
	srv := r47Start(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		store.failComplete.Store(true)
		return wrapperspb.String("done"), nil
	}, grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
	cc := r47Dial(t, srv.addr)
	start := time.Now()
	a := r47Call(context.Background(), cc, r47Do, "k2", "x")
	took := time.Since(start)
	t.Logf("answer %v after %v", a.err, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("a handler that answered at once was held %v by a failing save", took.Round(time.Millisecond))
	}
}
