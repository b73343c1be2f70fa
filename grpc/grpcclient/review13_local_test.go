package grpcclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

type failingCreds struct{}

func (failingCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return nil, errors.New("token source down")
}
func (failingCreds) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = failingCreds{}

// TestReview13CallersOwnErrorsDoNotOpenTheBreaker: errors made by grpc-go on
// the client side from the caller's own mistakes (bad metadata, an
// unregistered compressor or codec, a request that is not a proto message,
// a reply of the wrong type, per-call credentials that fail) must not
// count against the dependency. A breaker that opens after 1 failure must
// still let the next healthy call through.
func TestReview13CallersOwnErrorsDoNotOpenTheBreaker(t *testing.T) {
	srv := start(t)
	cases := map[string]func(ctx context.Context, cc *grpc.ClientConn) error{
		"bad metadata key": func(ctx context.Context, cc *grpc.ClientConn) error {
			ctx = metadata.NewOutgoingContext(ctx, metadata.MD{"bad key": []string{"v"}})
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), new(wrapperspb.StringValue))
		},
		"bad metadata value": func(ctx context.Context, cc *grpc.ClientConn) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "k", "line\nbreak")
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), new(wrapperspb.StringValue))
		},
		"unknown compressor": func(ctx context.Context, cc *grpc.ClientConn) error {
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.UseCompressor("nope"))
		},
		"unknown content subtype": func(ctx context.Context, cc *grpc.ClientConn) error {
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.CallContentSubtype("nope"))
		},
		"request not a proto": func(ctx context.Context, cc *grpc.ClientConn) error {
			return cc.Invoke(ctx, grpctest.Get, "not a proto", new(wrapperspb.StringValue))
		},
		"reply not a proto": func(ctx context.Context, cc *grpc.ClientConn) error {
			var s string
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), &s)
		},
		"per-call creds fail": func(ctx context.Context, cc *grpc.ClientConn) error {
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.PerRPCCredentials(failingCreds{}))
		},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			b := breaker.New(name, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
			client, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
			// Plain grpc-go's answer for reference.
			plain, err := grpctest.Dial(srv.Addr)
			require.NoError(t, err)
			defer plain.Close()
			perr := bad(t.Context(), plain)
			require.Error(t, perr)
			err = bad(t.Context(), cc)
			require.Error(t, err)
			t.Logf("plain: %v | interceptor: %v (code %v)", perr, err, status.Code(err))
			assert.Equal(t, status.Code(perr), status.Code(err), "status code preserved")
			_, err = client.Get(t.Context(), "healthy")
			assert.NoError(t, err, "a healthy call after the caller's own error must pass (breaker state %v)", b.State())
		})
	}
}
