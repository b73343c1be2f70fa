package grpcclient

// review171: attacks on the slow-upload rule (slowUploadLocked,
// callsOwnDeadline): a client stream that the call's own deadline ended
// while its caller had not closed its sending side, and which spent less
// than half of the attempt in SendMsg, is class rejected.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r171InputMethod = "/grpc.testing.TestService/StreamingInputCall"

// r171Server is an interop TestService whose handlers the test sets.
type r171Server struct {
	testgrpc.UnimplementedTestServiceServer
	input  func(grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error
	output func(*testgrpc.StreamingOutputCallRequest, grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error
	duplex func(grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error
}

func (s *r171Server) StreamingInputCall(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	return s.input(st)
}

func (s *r171Server) StreamingOutputCall(in *testgrpc.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	return s.output(in, st)
}

func (s *r171Server) FullDuplexCall(st grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	return s.duplex(st)
}

// r171Start serves srv on a free port and returns its address; it stops
// at the test's end.
func r171Start(t *testing.T, srv *r171Server, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// r171Dial returns a client of addr through ic.
func r171Dial(t *testing.T, addr string, ic *Interceptor) testgrpc.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func r171Msg(n int) *testgrpc.StreamingInputCallRequest {
	return &testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}}
}

// r171Hang is a handler that never reads and never answers: a hung
// handler (a deadlock, a downstream call that hangs).
func r171Hang(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	<-st.Context().Done()
	return st.Context().Err()
}

// r171Counted fails the test if err, a call's error, was left out of the
// breaker's count, or if b (when given) counted no failure.
func r171Counted(t *testing.T, err error, b *breaker.Breaker) {
	t.Helper()
	if err == nil {
		t.Fatal("the call succeeded")
	}
	if c := resilience.Classify(err); c == resilience.ClassRejected {
		t.Errorf("a failure of the dependency's was classified rejected (the caller's, not counted): %v", err)
	}
	if b != nil {
		if c := b.Counts(); c.TotalFailures != 1 {
			t.Errorf("breaker counts %+v: want the call counted as one failure", c)
		}
	}
}

// r171Upload sends every message with a pause between them (a caller
// that sends as its data comes), then closes and receives. It returns the
// call's error (nil for OK), and how long SendMsg held it in all.
func r171Upload(ctx context.Context, c testgrpc.TestServiceClient, n, size int, pause time.Duration) (error, time.Duration) {
	st, err := c.StreamingInputCall(ctx)
	if err != nil {
		return err, 0
	}
	var inSend time.Duration
	for i := 0; i < n; i++ {
		began := time.Now()
		err := st.SendMsg(r171Msg(size))
		inSend += time.Since(began)
		if err != nil {
			break // io.EOF: the status comes from CloseAndRecv
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	_, err = st.CloseAndRecv()
	return err, inSend
}

func r171Breaker() *breaker.Breaker {
	return breaker.New("r171")
}

// 1. A retried client stream whose replay of the messages sent so far
// the second server does not read: flow control holds the replay, and the
// caller's next SendMsg waits for it the whole attempt (in
// currentLocked, before its sendWait clock starts). The attempt's
// sendWait is 0: taken for a slow upload, rejected, although the caller
// was held by the dependency from the attempt's start to its end.
func TestReview171ReplayHeldByHungServerIsCounted(t *testing.T) {
	t.Run("window64k", func(t *testing.T) {
		r171Replay(t, grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	})
	t.Run("defaults", func(t *testing.T) { r171Replay(t) })
}

func r171Replay(t *testing.T, opts ...grpc.ServerOption) {
	var calls atomic.Int32
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		if calls.Add(1) == 1 {
			// First instance: reads what came, then fails over
			// (draining, overloaded): UNAVAILABLE, retried.
			for i := 0; i < 7; i++ {
				if _, err := st.Recv(); err != nil {
					return err
				}
			}
			return status.Error(codes.Unavailable, "draining")
		}
		return r171Hang(st) // the retry meets a hung handler
	}}
	// A fixed 64 KiB window (as many servers configure it): the server's
	// BDP estimation off.
	addr := r171Start(t, srv, opts...)
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithTimeBudget(1500*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
	)), RetryMethods(r171InputMethod))
	c := r171Dial(t, addr, ic)

	st, err := c.StreamingInputCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// 7 x 32 KiB fast (224 KiB, under MaxReplayBuffer), the server reads
	// them; then the caller goes on sending as fast as it can.
	began := time.Now()
	var inSend time.Duration
	for i := 0; i < 40; i++ {
		s := time.Now()
		err := st.SendMsg(r171Msg(32 << 10))
		inSend += time.Since(s)
		if err != nil {
			break
		}
		if i == 6 {
			time.Sleep(100 * time.Millisecond) // the first server answers UNAVAILABLE
		}
	}
	_, err = st.CloseAndRecv()
	total := time.Since(began)
	t.Logf("attempts at the server %d, caller held in SendMsg %v of %v, err %v", calls.Load(), inSend, total, err)
	if inSend < total/2 {
		t.Skipf("the caller was not held by the server (%v of %v): no attack", inSend, total)
	}
	r171Counted(t, err, b)
}

// 2. A hung handler, small messages at the caller's pace: the window never
// fills, so SendMsg never blocks, and the dependency's hang is taken for
// the caller's slow upload. The class of failure the rule cannot tell
// apart (documented for HTTP's full-duplex body; the gRPC doc claims "no
// server answers before it has the whole request", which says nothing of
// a server that never will).
func TestReview171PacedUploadToHungHandlerIsCounted(t *testing.T) {
	addr := r171Start(t, &r171Server{input: r171Hang})
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Second))))
	c := r171Dial(t, addr, ic)
	// 1 KiB every 20 ms: 50 KiB/s, a log or metrics shipper; 2 s of data.
	err, inSend := r171Upload(context.Background(), c, 100, 1<<10, 20*time.Millisecond)
	t.Logf("held in SendMsg %v, err %v", inSend, err)
	r171Counted(t, err, b)
}

// 3. A handler that read half the upload and then stopped reading
// (hung on a downstream call): the caller's later messages pile up in
// the window, its SendMsg blocks only once the window is full.
func TestReview171ServerStopsReadingMidStreamIsCounted(t *testing.T) {
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		for i := 0; i < 10; i++ {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
		return r171Hang(st)
	}}
	addr := r171Start(t, srv)
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(1500*time.Millisecond))))
	c := r171Dial(t, addr, ic)
	// 8 KiB every 10 ms: the window (64 KiB + grpc-go's write quota) is
	// full after ~16 messages past the 10 read, some 260 ms in.
	err, inSend := r171Upload(context.Background(), c, 1000, 8<<10, 10*time.Millisecond)
	t.Logf("held in SendMsg %v, err %v", inSend, err)
	r171Counted(t, err, b)
}

// r171Proxy is a TCP proxy to addr that can be frozen: it stops copying
// either way (a dead server behind a TCP proxy or a load balancer, or
// one stopped by SIGSTOP), keeping the connections open.
type r171Proxy struct {
	addr   string
	frozen chan struct{}
	once   sync.Once
}

func r171StartProxy(t *testing.T, to string) *r171Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &r171Proxy{addr: lis.Addr().String(), frozen: make(chan struct{})}
	var conns sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		lis.Close()
		conns.Wait()
	})
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			pipe := func(dst, src net.Conn) {
				defer conns.Done()
				buf := make([]byte, 4096)
				for {
					n, err := src.Read(buf)
					if err != nil {
						break
					}
					select {
					case <-p.frozen:
						<-done // hold the bytes, and the connection
						in.Close()
						out.Close()
						return
					default:
					}
					if _, err := dst.Write(buf[:n]); err != nil {
						break
					}
				}
				in.Close()
				out.Close()
			}
			conns.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return p
}

func (p *r171Proxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// 4. A dead server behind a TCP proxy: the connection stays open, the
// bytes go nowhere. A paced client stream is taken for a slow upload.
func TestReview171DeadServerBehindProxyIsCounted(t *testing.T) {
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		n := 0
		for {
			_, err := st.Recv()
			if err == io.EOF {
				return st.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
			}
			if err != nil {
				return err
			}
			n++
		}
	}}
	p := r171StartProxy(t, r171Start(t, srv))
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Second))))
	c := r171Dial(t, p.addr, ic)
	// A healthy call first: the connection is up.
	if err, _ := r171Upload(context.Background(), c, 3, 100, 0); err != nil {
		t.Fatalf("healthy call: %v", err)
	}
	b2 := r171Breaker() // count the next call alone
	ic2 := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b2), pipeline.WithTimeBudget(time.Second))))
	c2 := r171Dial(t, p.addr, ic2)
	if err, _ := r171Upload(context.Background(), c2, 1, 100, 0); err != nil {
		t.Fatalf("healthy call: %v", err)
	}
	p.freeze() // the server dies
	err, inSend := r171Upload(context.Background(), c2, 100, 512, 20*time.Millisecond)
	t.Logf("held in SendMsg %v, err %v", inSend, err)
	if err == nil {
		t.Fatal("the call succeeded")
	}
	if c := resilience.Classify(err); c == resilience.ClassRejected {
		t.Errorf("a dead server was classified rejected (the caller's slow upload): %v", err)
	}
	if c := b2.Counts(); c.TotalFailures != 1 {
		t.Errorf("breaker counts %+v: want the dead server's call counted", c)
	}
}

// 5. The attempt timeout ends two attempts against a hung server (each a
// transient failure, counted as the doc says); the budget ends the third.
// The caller is paced: the call as a whole is rejected, so the breaker
// hears nothing of three hangs.
func TestReview171AttemptTimeoutsThenBudgetIsCounted(t *testing.T) {
	addr := r171Start(t, &r171Server{input: r171Hang})
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithTimeBudget(time.Second),
		pipeline.WithAttemptTimeout(300*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
	)), RetryMethods(r171InputMethod))
	c := r171Dial(t, addr, ic)
	err, inSend := r171Upload(context.Background(), c, 200, 1<<10, 20*time.Millisecond)
	t.Logf("held in SendMsg %v, err %v", inSend, err)
	if !errors.Is(err, pipeline.ErrAttemptTimeout) {
		t.Logf("note: the error does not match ErrAttemptTimeout")
	}
	r171Counted(t, err, b)
}

// 6. Holds? A server that reads the stream and answers early with its
// own error while the caller still sends slowly: its error, counted.
func TestReview171EarlyErrorIsCounted(t *testing.T) {
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		if _, err := st.Recv(); err != nil {
			return err
		}
		return status.Error(codes.Internal, "boom")
	}}
	addr := r171Start(t, srv)
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Second))))
	c := r171Dial(t, addr, ic)
	err, _ := r171Upload(context.Background(), c, 100, 1<<10, 20*time.Millisecond)
	if status.Code(err) != codes.Internal {
		t.Errorf("err %v: want the server's INTERNAL", err)
	}
	r171Counted(t, err, b)
}

// 7. Holds? A server whose handler reads a few messages and then answers
// DEADLINE_EXCEEDED of its own (its downstream call timed out), well
// before the caller's deadline: the server's answer, counted.
func TestReview171ServersOwnDeadlineExceededIsCounted(t *testing.T) {
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		for i := 0; i < 3; i++ {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
		return status.Error(codes.DeadlineExceeded, "downstream timed out")
	}}
	addr := r171Start(t, srv)
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(2*time.Second))))
	c := r171Dial(t, addr, ic)
	err, _ := r171Upload(context.Background(), c, 100, 1<<10, 20*time.Millisecond)
	r171Counted(t, err, b)
}

// 8. A server that propagates the deadline and answers DEADLINE_EXCEEDED
// of its own as it comes (its downstream hung, with the deadline it was
// given): the answer lands within 10 ms of the caller's deadline, and
// endedBy waits for the context and calls it the caller's own.
func TestReview171PropagatedDeadlineFromHungDownstreamIsCounted(t *testing.T) {
	srv := &r171Server{input: func(st grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
		// It reads what comes, and calls a downstream that hangs, with
		// its deadline less a few ms, as a service that forwards it does.
		dl, _ := st.Context().Deadline()
		for time.Until(dl) > 40*time.Millisecond {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
		time.Sleep(time.Until(dl) - 5*time.Millisecond)
		return status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	}}
	addr := r171Start(t, srv)
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(time.Second))))
	c := r171Dial(t, addr, ic)
	err, _ := r171Upload(context.Background(), c, 100, 1<<10, 20*time.Millisecond)
	r171Counted(t, err, b)
}

// 9. The server's MaxConcurrentStreams is taken by hung calls: the
// stream waits in grpc-go's NewStream for a slot (time counted in the
// attempt, a.opened being set before the streamer), then meets a hung
// handler too. The caller sends as fast as it can from the moment it has
// the stream and is held by flow control to the end, yet the wait for
// the slot makes its SendMsg time less than half the attempt: rejected.
func TestReview171StreamSlotWaitThenHangIsCounted(t *testing.T) {
	srv := &r171Server{
		input: r171Hang,
		duplex: func(st grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
			<-st.Context().Done()
			return st.Context().Err()
		},
	}
	addr := r171Start(t, srv, grpc.MaxConcurrentStreams(1))
	b := r171Breaker()
	ic := New(WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(1500*time.Millisecond))))
	c := r171Dial(t, addr, ic)
	// Another call of the same connection holds the one slot for 1 s.
	// (A plain context deadline: it ends on time.)
	if _, err := c.EmptyCall(context.Background(), &testgrpc.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("warm-up: %v", err) // the connection is up, SETTINGS known
	}
	base := b.Counts().TotalFailures
	hold, cancel := context.WithTimeout(context.Background(), 1000*time.Millisecond)
	defer cancel()
	blocker, err := c.FullDuplexCall(hold)
	if err != nil {
		t.Fatal(err)
	}
	go blocker.Recv()
	time.Sleep(50 * time.Millisecond) // its HEADERS out
	began := time.Now()
	st, err := c.StreamingInputCall(context.Background())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	opened := time.Since(began)
	var inSend time.Duration
	for i := 0; i < 1000; i++ {
		s := time.Now()
		err := st.SendMsg(r171Msg(32 << 10))
		inSend += time.Since(s)
		if err != nil {
			break
		}
	}
	_, err = st.CloseAndRecv()
	t.Logf("opened after %v; held in SendMsg %v of %v; err %v", opened, inSend, time.Since(began)-opened, err)
	r171Counted(t, err, nil)
	<-hold.Done()
	time.Sleep(50 * time.Millisecond)
	// The blocker (a bidi stream its deadline ended) counts one; the
	// upload must count one more.
	if got := b.Counts().TotalFailures - base; got < 2 {
		t.Errorf("breaker failures %d: want the blocker and the upload counted", got)
	}
}
