package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r130Chat = "/r130.Bidi/Chat"

var r130ChatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// Bidi streams whose server reads everything, and fails before answering
// (uncommitted) on some attempts, at random points: each stream the caller
// sends on from one goroutine and reads from another gets back exactly
// what it sent, in order, once; the server's successful attempt saw
// exactly the messages sent; nothing is left running.
func TestReview130BidiReplayStress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var okSeen sync.Map // stream id -> joined messages the server answered for
	var attempts atomic.Int64
	desc := grpc.ServiceDesc{
		ServiceName: "r130.Bidi",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			attempts.Add(1)
			var got []string
			failAt := -1
			if rand.IntN(2) == 0 {
				failAt = rand.IntN(8)
			}
			for {
				if len(got) == failAt {
					return status.Error(codes.Unavailable, "flaky")
				}
				in := new(wrapperspb.StringValue)
				err := ss.RecvMsg(in)
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				got = append(got, in.GetValue())
			}
			if len(got) > 0 {
				id := strings.SplitN(got[0], ":", 2)[0]
				if prev, dup := okSeen.LoadOrStore(id, strings.Join(got, ",")); dup {
					return status.Errorf(codes.Internal, "stream %s answered twice (%v)", id, prev)
				}
			}
			for _, g := range got {
				if err := ss.SendMsg(wrapperspb.String(g)); err != nil {
					return err
				}
			}
			return nil
		}}},
	}
	srv := grpc.NewServer()
	srv.RegisterService(&desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// Half the server's attempts fail: 12 attempts failed all of one
	// stream in about 1 run in 50 by chance alone (0.5^12 a stream, CI
	// once); 30 leave that to 1 in 10^9.
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(30), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(3*time.Millisecond))))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130Chat))
	cc, err := grpc.NewClient(lis.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	const streams = 300
	var wg sync.WaitGroup
	var failures atomic.Int64
	errs := make(chan error, streams)
	sem := make(chan struct{}, 16)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			abandon := i%10 == 9
			st, err := cc.NewStream(ctx, r130ChatDesc, r130Chat)
			if err != nil {
				errs <- fmt.Errorf("%d: open: %w", i, err)
				return
			}
			n := 1 + rand.IntN(10)
			var want []string
			for j := 0; j < n; j++ {
				want = append(want, fmt.Sprintf("s%d:%d", i, j))
			}
			sendDone := make(chan error, 1)
			go func() {
				for _, w := range want {
					m := wrapperspb.String(w)
					if err := st.SendMsg(m); err != nil {
						sendDone <- err
						return
					}
					m.Value = "reused-after-send" // the caller reuses its message
				}
				sendDone <- st.CloseSend()
			}()
			var got []string
			for {
				if abandon && len(got) == 1 {
					cancel()
				}
				m := new(wrapperspb.StringValue)
				err := st.RecvMsg(m)
				if err == io.EOF {
					break
				}
				if err != nil {
					if abandon && status.Code(err) == codes.Canceled {
						<-sendDone
						return
					}
					failures.Add(1)
					errs <- fmt.Errorf("%d: recv after %v: %w", i, got, err)
					<-sendDone
					return
				}
				got = append(got, m.GetValue())
			}
			if serr := <-sendDone; serr != nil && !errors.Is(serr, io.EOF) {
				errs <- fmt.Errorf("%d: send: %w", i, serr)
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				errs <- fmt.Errorf("%d: got %v, sent %v", i, got, want)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n < 10 {
			t.Error(err)
		}
		n++
	}
	t.Logf("%d server attempts for %d streams; %d errors", attempts.Load(), streams, n)
	cc.Close()
	srv.Stop()
	time.Sleep(50 * time.Millisecond)
}
