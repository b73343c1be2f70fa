package grpcclient_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
)

// A bidi stream with a sender and a receiver goroutine, whose first attempt
// fails before headers while messages are being sent: the retry sees every
// message once, in order, and the receiver gets every echo once, in order.
func TestReview53_BidiConcurrentSendRecvRetry(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	for iter := range 30 {
		srv.Reset()
		srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1 + iter%2, Delay: time.Duration(iter%6) * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := st.SendMsg(wrapperspb.String(fmt.Sprint(i))); err != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
				if i%20 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			_ = st.CloseSend()
		}()
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			err := st.RecvMsg(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("iter %d recv: %v", iter, err)
			}
			got = append(got, m.GetValue())
		}
		wg.Wait()
		cancel()
		var want []string
		for i := range n {
			want = append(want, fmt.Sprint(i))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("iter %d: got %d echoes: %v", iter, len(got), got[:min(10, len(got))])
		}
		calls := srv.Calls(grpctest.Chat)
		last := calls[len(calls)-1]
		if strings.Join(last.Received, ",") != strings.Join(want, ",") {
			t.Fatalf("iter %d: server's last call got %d: %v", iter, len(last.Received), last.Received[:min(10, len(last.Received))])
		}
	}
}

// Server's own recv limit on a client stream, before headers: rejected, not retried, not counted.
func TestReview53_ServerRecvLimitStream(t *testing.T) {
	review53Leak(t)
	srv, err := grpctest.Start(grpc.MaxRecvMsgSize(1 << 10))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	b := breaker.New("r53srvlim", breaker.ConsecutiveFailures(1))
	_, cc := review53Rig(t, b)
	_ = cc
	cc2, err := grpctest.Dial(srv.Addr, review53Dial(b)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	c := grpctest.NewClient(cc2)
	_, err = c.Upload(context.Background(), []string{"a", strings.Repeat("x", 4<<10)})
	t.Logf("Upload: %v", err)
	if n := srv.Count(grpctest.Upload); n != 1 {
		t.Fatalf("%d attempts", n)
	}
	if _, err := c.Get(context.Background(), "ok"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
}
