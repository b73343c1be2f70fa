package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A ClientConn whose calls ride out two UNAVAILABLE answers, and whose
// target gets a breaker of its own.
func Example() {
	srv, err := grpctest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 2})
	ctx := context.Background()

	orders := pipeline.New(
		pipeline.WithTimeBudget(2*time.Second), // the call's deadline
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))),
		pipeline.WithAttemptTimeout(500*time.Millisecond), // each attempt's
	)
	interceptor := grpcclient.New(
		grpcclient.WithPipeline(orders),
		grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker { return breaker.New(target) }),
	)
	conn, err := grpc.NewClient(srv.Addr, append(interceptor.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	got, err := grpctest.NewClient(conn).Get(ctx, "order-1") // Get is NO_SIDE_EFFECTS: retried
	fmt.Println(got, err, srv.Count(grpctest.Get), "attempts")
	// Output: get:order-1 <nil> 3 attempts
}

// A call that a breaker rejects fails fast with codes.Unavailable, and its
// error matches breaker.ErrOpen.
func Example_breakerOpen() {
	srv, err := grpctest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	interceptor := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithBreaker(breaker.New("orders", breaker.ConsecutiveFailures(2))),
	)))
	conn, err := grpc.NewClient(srv.Addr, append(interceptor.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := grpctest.NewClient(conn)

	for range 3 {
		_, err := client.Get(context.Background(), "order-1")
		fmt.Println(status.Code(err), errors.Is(err, breaker.ErrOpen))
	}
	fmt.Println(srv.Count(grpctest.Get), "attempts reached the server")
	// Output:
	// Unavailable false
	// Unavailable false
	// Unavailable true
	// 4 attempts reached the server
}

// A method that is not idempotent is retried only with an idempotency key,
// the same on every attempt.
func ExampleIdempotencyKey() {
	srv, err := grpctest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	interceptor := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(
		retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	conn, err := grpc.NewClient(srv.Addr, append(interceptor.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := grpctest.NewClient(conn)

	_, err = client.Create(context.Background(), "order-1") // no key: tried once
	fmt.Println(status.Code(err))
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	got, err := client.Create(context.Background(), "order-2", grpcclient.IdempotencyKey("order-2"))
	fmt.Println(got, err)
	fmt.Println(srv.Count(grpctest.Create), "attempts")
	// Output:
	// Unavailable
	// created:order-2 <nil>
	// 3 attempts
}
