package grpcidempotency

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

type r49Store struct {
	mem  *idempotency.MemoryStore
	hang atomic.Bool
}

func (s *r49Store) gate(ctx context.Context) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}
func (s *r49Store) Begin(ctx context.Context, k string, c idempotency.Record, l time.Duration) (*idempotency.Record, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	return s.mem.Begin(ctx, k, c, l)
}
func (s *r49Store) Renew(ctx context.Context, k string, c idempotency.Record, l time.Duration) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Renew(ctx, k, c, l)
}
func (s *r49Store) Complete(ctx context.Context, k string, c, r idempotency.Record, ttl time.Duration) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Complete(ctx, k, c, r, ttl)
}
func (s *r49Store) Release(ctx context.Context, k string, c idempotency.Record) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	return s.mem.Release(ctx, k, c)
}

func r49Ctx() context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(idempotencykey.MetadataKey, "key-1"))
}

// A handler answering UNAVAILABLE (a release code) as the store hangs,
// a renewal in flight: how long the interceptor holds the answer.
func TestReview49_InterceptorHoldsUnavailable(t *testing.T) {
	for _, code := range []codes.Code{codes.OK, codes.Unavailable} {
		t.Run(code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &r49Store{mem: idempotency.NewMemoryStore(0)}
				g := idempotency.NewGuard(s, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(time.Second), idempotency.FailOpenAfter(-1))
				ic := UnaryServerInterceptor(g, SharedKeys())
				var ended time.Time
				h := func(ctx context.Context, req any) (any, error) {
					time.Sleep(500 * time.Millisecond)
					s.hang.Store(true)
					time.Sleep(600 * time.Millisecond)
					ended = time.Now()
					if code != codes.OK {
						return nil, grpcstatus.Error(code, "busy")
					}
					return wrapperspb.String("ok"), nil
				}
				ic(r49Ctx(), wrapperspb.String("req"), &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"}, h)
				held := time.Since(ended)
				t.Logf("%v: answer held %v after the handler (StoreTimeout 1s)", code, held)
				if held > 2500*time.Millisecond { // two StoreTimeouts when the key is freed (the doc)
					t.Errorf("%v: answer held %v after the handler, more than two StoreTimeouts", code, held)
				}
				s.hang.Store(false)
				time.Sleep(10 * time.Second)
			})
		})
	}
}

// A panicking handler frees the key (deferred Release); one that ran
// and answered is replayed, not run again, even while its save goes on.
func TestReview49_InterceptorPanicAndRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &r49Store{mem: idempotency.NewMemoryStore(0)}
		g := idempotency.NewGuard(s, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(time.Second), idempotency.FailOpenAfter(-1))
		ic := UnaryServerInterceptor(g, SharedKeys())
		var runs atomic.Int64
		info := &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"}
		func() {
			defer func() { recover() }()
			ic(r49Ctx(), wrapperspb.String("req"), info, func(ctx context.Context, req any) (any, error) { runs.Add(1); panic("boom") })
		}()
		resp, err := ic(r49Ctx(), wrapperspb.String("req"), info, func(ctx context.Context, req any) (any, error) {
			runs.Add(1)
			s.hang.Store(true)
			return wrapperspb.String("ok"), nil
		})
		if err != nil || runs.Load() != 2 {
			t.Fatalf("after panic: runs %d err %v resp %v", runs.Load(), err, resp)
		}
		for i := range 8 {
			if i == 1 {
				s.hang.Store(false)
			}
			_, err := ic(r49Ctx(), wrapperspb.String("req"), info, func(ctx context.Context, req any) (any, error) { runs.Add(1); return wrapperspb.String("again"), nil })
			t.Logf("repeat %d at %v: %v", i, time.Now().Format("05.000"), err)
			time.Sleep(700 * time.Millisecond)
		}
		if runs.Load() != 2 {
			t.Errorf("ran %d times", runs.Load())
		}
		_ = errors.New
		time.Sleep(10 * time.Second)
	})
}
