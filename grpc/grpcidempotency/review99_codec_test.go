package grpcidempotency_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// r99Order is a request of a service on a codec other than proto's (a
// JSON or flatbuffers codec registered with encoding.RegisterCodec): a Go
// value that is not a proto message.
type r99Order struct{ ID string }

// A keyed call (grpcclient's AutoIdempotencyKey sends a key on every call
// of a method that is not idempotent) to such a service is refused with
// INVALID_ARGUMENT before the handler runs, as the package doc says: the
// fingerprint and the record are of proto messages, and the call is not
// served without the guard it asked for (review99 found it undocumented).
func TestReview99KeyedCallOfANonProtoCodecIsRefused(t *testing.T) {
	ic := grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(idempotency.NewMemoryStore(0)), grpcidempotency.SharedKeys())
	runs := 0
	h := func(ctx context.Context, req any) (any, error) { runs++; return &r99Order{ID: "done"}, nil }
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idempotencykey.MetadataKey, "k-1"))
	_, err := ic(ctx, &r99Order{ID: "1"}, &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Create"}, h)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Zero(t, runs)
	// Without a key, it passes through.
	_, err = ic(context.Background(), &r99Order{ID: "2"}, &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Create"}, h)
	assert.NoError(t, err)
	assert.Equal(t, 1, runs)
}
