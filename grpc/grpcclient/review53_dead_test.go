package grpcclient_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
)

// NewStream against a dead port, canceled while retrying: prompt, CANCELED, no leak.
func TestReview53_DeadTargetCancel(t *testing.T) {
	review53Leak(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cc, err := grpctest.Dial(addr, review53Dial(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, d := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(d); cancel() }()
		start := time.Now()
		_, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("took %v", took)
		}
		if status.Code(err) != codes.Canceled && status.Code(err) != codes.Unavailable {
			t.Fatalf("err %v", err)
		}
		cancel()
	}
}

// A unary request over MaxCallSendMsgSize: not counted.
func TestReview53_UnarySendLimitNotCounted(t *testing.T) {
	review53Leak(t)
	b := breaker.New("r53send", breaker.ConsecutiveFailures(1))
	srv, cc := review53Rig(t, b, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<10)))
	c := grpctest.NewClient(cc)
	for range 3 {
		if _, err := c.Get(context.Background(), strings.Repeat("x", 2<<10)); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("err %v", err)
		}
	}
	if _, err := c.Get(context.Background(), "ok"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	if n := srv.Count(grpctest.Get); n != 1 {
		t.Fatalf("server saw %d", n)
	}
}
