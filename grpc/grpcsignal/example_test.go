package grpcsignal_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A handler whose outbound call gave up after retrying answers with the
// dependency's code and a "don't retry" pushback.
func ExampleError() {
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), &stream{})
	outbound := &retrypolicy.Error{Attempts: 3, Reason: retrypolicy.ErrMaxAttempts, Last: status.Error(14, "down")}
	err := grpcsignal.Error(ctx, outbound)
	fmt.Println(status.Code(err), status.Convert(err).Message())
	fmt.Println(grpcsignal.PushbackKey, trailer[grpcsignal.PushbackKey])
	// Output:
	// Unavailable a dependency failed after retrying; do not retry
	// grpc-retry-pushback-ms [-1]
}

// trailer is what stream, the stand-in for grpc-go's, was given.
var trailer metadata.MD

type stream struct{ grpc.ServerTransportStream }

func (*stream) SetTrailer(md metadata.MD) error { trailer = md; return nil }
