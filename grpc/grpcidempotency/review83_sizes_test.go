package grpcidempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// A unary answer whose marshaled size is around MaxResponse: replayed
// byte-exact up to it, refused over it, the handler never run twice.
func TestReview83GRPCSizes(t *testing.T) {
	const max = 100
	for _, n := range []int{0, max - 3, max - 2, max - 1, max + 50} { // BytesValue adds 2 bytes under 128
		for _, asErr := range []bool{false, true} {
			t.Run(fmt.Sprint(n, asErr), func(t *testing.T) {
				g := idempotency.NewGuard(idempotency.NewMemoryStore(0), idempotency.MaxResponse(max))
				icpt := grpcidempotency.UnaryServerInterceptor(g, grpcidempotency.SharedKeys())
				var runs atomic.Int64
				payload := make([]byte, n)
				for i := range payload {
					payload[i] = byte(i)
				}
				msg := wrapperspb.Bytes(payload)
				size := proto.Size(msg)
				h := func(ctx context.Context, req any) (any, error) {
					runs.Add(1)
					if asErr {
						return nil, grpcstatus.Error(codes.FailedPrecondition, string(make([]byte, n)))
					}
					return msg, nil
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/review.S/M"}
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idempotencykey.MetadataKey, "k83"))
				r1, e1 := icpt(ctx, wrapperspb.String("req"), info, h)
				var wg sync.WaitGroup
				for i := 0; i < 8; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r2, e2 := icpt(ctx, wrapperspb.String("req"), info, h)
						switch {
						case asErr:
							if grpcstatus.Code(e2) == codes.FailedPrecondition {
								if grpcstatus.Convert(e2).Message() != grpcstatus.Convert(e1).Message() {
									t.Errorf("replayed error differs")
								}
								return
							}
							if grpcstatus.Code(e2) != codes.Internal {
								t.Errorf("n=%d err: repeat %v", n, e2)
							}
						case size <= max:
							if e2 != nil || !proto.Equal(r2.(proto.Message), r1.(proto.Message)) {
								t.Errorf("n=%d size=%d: repeat %v %v", n, size, r2, e2)
							}
						default:
							if grpcstatus.Code(e2) != codes.Internal {
								t.Errorf("n=%d size=%d: repeat over max: %v %v", n, size, r2, e2)
							}
						}
					}()
				}
				wg.Wait()
				if runs.Load() != 1 {
					t.Fatalf("ran %d", runs.Load())
				}
			})
		}
	}
}
