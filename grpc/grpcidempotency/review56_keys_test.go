package grpcidempotency_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

type r56Store struct {
	idempotency.Store
	mu   sync.Mutex
	keys []string
}

func (s *r56Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
	return s.Store.Begin(ctx, key, claim, lease)
}

func TestReview56GRPCKeys(t *testing.T) {
	st := &r56Store{Store: idempotency.NewMemoryStore(0)}
	ic := grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(st), grpcidempotency.SharedKeys())
	var runs atomic.Int64
	h := func(ctx context.Context, req any) (any, error) {
		return wrapperspb.Int64(runs.Add(1)), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.S/M"}
	call := func(md metadata.MD) (int64, error) {
		ctx := metadata.NewIncomingContext(context.Background(), md)
		resp, err := ic(ctx, wrapperspb.String("x"), info, h)
		if err != nil {
			return 0, err
		}
		return resp.(*wrapperspb.Int64Value).Value, nil
	}
	for _, vs := range [][]string{{""}, {" "}, {`""`}, {"a\x00"}, {"é"}, {"a b"}, {strings.Repeat("k", 256)}, {"a", "a"}, {"a", "b"}, {`"a`}} {
		_, err := call(metadata.MD{"idempotency-key": vs})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%q: %v, want InvalidArgument", vs, err)
		}
	}
	if len(st.keys) != 0 || runs.Load() != 0 {
		t.Errorf("refused keys reached store %q / ran %d", st.keys, runs.Load())
	}
	groups := [][]string{{"a", `"a"`}, {"A"}, {`"a b"`}, {`"\\"`}, {"{t}x"}, {strings.Repeat("z", 255)}}
	seen := map[int64]bool{}
	for _, g := range groups {
		var first int64
		for j, raw := range g {
			for rep := 0; rep < 2; rep++ {
				v, err := call(metadata.MD{"idempotency-key": {raw}})
				if err != nil {
					t.Errorf("%q: %v", raw, err)
					continue
				}
				if j == 0 && rep == 0 {
					if seen[v] {
						t.Errorf("%q collides", raw)
					}
					seen[v], first = true, v
				} else if v != first {
					t.Errorf("%q rep %d: got run %d, want replay of %d", raw, rep, v, first)
				}
			}
		}
	}
	if int(runs.Load()) != len(groups) {
		t.Errorf("runs %d want %d", runs.Load(), len(groups))
	}
}
