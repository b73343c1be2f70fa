package grpcidempotency_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// A server that runs each call with an idempotency key once, and replays
// its answer to the repeats.
func ExampleUnaryServerInterceptor() {
	store := idempotency.NewMemoryStore(0) // or Redis, or SQL, shared by the replicas
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(store), grpcidempotency.SharedKeys())))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	conn, err := grpctest.Dial(srv.Addr)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := grpctest.NewClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), idempotencykey.MetadataKey, "order-42")
	for range 2 {
		var header metadata.MD
		got, err := client.Create(ctx, "order", grpc.Header(&header))
		fmt.Println(got, err, header.Get(grpcidempotency.ReplayedKey))
	}
	fmt.Println("the handler ran", srv.Count(grpctest.Create), "time")
	// Output:
	// created:order <nil> []
	// created:order <nil> [true]
	// the handler ran 1 time
}
