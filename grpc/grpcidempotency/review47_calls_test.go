package grpcidempotency_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// recoverer is the usual panic-recovery interceptor, outermost.
func r47Recover(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(ctx, req)
}

func r47Idem(t testing.TB, h r47Handler, g *idempotency.Guard, opts ...grpcidempotency.Option) (*r47Server, *grpc.ClientConn) {
	if len(opts) == 0 {
		opts = []grpcidempotency.Option{grpcidempotency.SharedKeys()}
	}
	srv := r47Start(t, h, grpc.ChainUnaryInterceptor(r47Recover, grpcidempotency.UnaryServerInterceptor(g, opts...)))
	return srv, r47Dial(t, srv.addr)
}

func TestReview47PanicAfterMetadataFreesTheKey(t *testing.T) {
	n := 0
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		n++
		if n == 1 {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-first", "1"))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("t-first", "1"))
			panic("boom")
		}
		return wrapperspb.String("ok"), nil
	}, nil)
	a := r47Call(context.Background(), cc, r47Do, "p1", "x")
	if status.Code(a.err) != codes.Internal {
		t.Fatalf("first: %v", a.err)
	}
	b := r47Call(context.Background(), cc, r47Do, "p1", "x")
	c := r47Call(context.Background(), cc, r47Do, "p1", "x")
	if b.err != nil || c.err != nil || srv.runs.Load() != 2 {
		t.Fatalf("retry after a panic: %v, replay %v, runs %d", b.err, c.err, srv.runs.Load())
	}
	if len(c.header.Get("x-first")) > 0 || len(c.trailer.Get("t-first")) > 0 {
		t.Errorf("the replay carries the panicked run's metadata: %v %v", c.header, c.trailer)
	}
	if c.header.Get(grpcidempotency.ReplayedKey)[0] != "true" || len(b.header.Get(grpcidempotency.ReplayedKey)) != 0 {
		t.Errorf("replay marks: %v / %v", b.header, c.header)
	}
}

// runtime.Goexit in a handler: grpc-go never answers that call (its
// goroutine is gone); the key must still be freed for the retry.
func TestReview47GoexitFreesTheKey(t *testing.T) {
	n := 0
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		n++
		if n == 1 {
			runtime.Goexit()
		}
		return wrapperspb.String("ok"), nil
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a := r47Call(ctx, cc, r47Do, "g1", "x")
	t.Logf("first: %v", a.err)
	b := r47Call(context.Background(), cc, r47Do, "g1", "x")
	if b.err != nil || srv.runs.Load() != 2 {
		t.Errorf("retry after Goexit: %v, runs %d", b.err, srv.runs.Load())
	}
}

func TestReview47ErrorAfterMetadataReplaysEqual(t *testing.T) {
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-h", "1", "x-h", "2", "x-b-bin", "\x00\x01\xff", "x-b-bin", ""))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-t", "t", "x-tb-bin", "\xfe"))
		st, _ := status.New(codes.FailedPrecondition, "ünïcode \x00 msg").WithDetails(wrapperspb.String("d1"), wrapperspb.Int64(7))
		return nil, st.Err()
	}, nil)
	a := r47Call(context.Background(), cc, r47Do, "e1", "x")
	b := r47Call(context.Background(), cc, r47Do, "e1", "x")
	if srv.runs.Load() != 1 {
		t.Fatalf("runs %d", srv.runs.Load())
	}
	sa, sb := status.Convert(a.err), status.Convert(b.err)
	if sa.Code() != sb.Code() || sa.Message() != sb.Message() || fmt.Sprint(sa.Details()) != fmt.Sprint(sb.Details()) {
		t.Errorf("status: %v %q %v vs %v %q %v", sa.Code(), sa.Message(), sa.Details(), sb.Code(), sb.Message(), sb.Details())
	}
	delete(b.header, grpcidempotency.ReplayedKey)
	for _, k := range []string{"x-h", "x-b-bin"} {
		if fmt.Sprintf("%q", a.header.Get(k)) != fmt.Sprintf("%q", b.header.Get(k)) {
			t.Errorf("header %s: %q vs %q", k, a.header.Get(k), b.header.Get(k))
		}
	}
	for _, k := range []string{"x-t", "x-tb-bin"} {
		if fmt.Sprintf("%q", a.trailer.Get(k)) != fmt.Sprintf("%q", b.trailer.Get(k)) {
			t.Errorf("trailer %s: %q vs %q", k, a.trailer.Get(k), b.trailer.Get(k))
		}
	}
	t.Logf("first %v %v; replay %v %v", a.header, a.trailer, b.header, b.trailer)
}

func TestReview47ClientCancelsMidCall(t *testing.T) {
	for _, honour := range []bool{false, true} {
		t.Run(fmt.Sprint("honours ctx=", honour), func(t *testing.T) {
			committed := make(chan struct{}, 4)
			srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				<-ctx.Done()
				if honour {
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				committed <- struct{}{}
				return wrapperspb.String("committed"), nil
			}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			a := r47Call(ctx, cc, r47Do, "c1", "x")
			if status.Code(a.err) != codes.Canceled {
				t.Fatalf("first: %v", a.err)
			}
			time.Sleep(100 * time.Millisecond)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel2()
			b := r47Call(ctx2, cc, r47Do, "c1", "x")
			t.Logf("retry: %v %q runs %d", status.Code(b.err), b.resp.GetValue(), srv.runs.Load())
			if !honour && (b.err != nil || b.resp.GetValue() != "committed" || srv.runs.Load() != 1) {
				t.Errorf("a committed call run again or not replayed: %v runs %d", b.err, srv.runs.Load())
			}
			if honour && srv.runs.Load() != 2 {
				t.Errorf("a CANCELED call's key not freed: runs %d", srv.runs.Load())
			}
		})
	}
}

func TestReview47DeadlineShorterThanHandler(t *testing.T) {
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		time.Sleep(200 * time.Millisecond) // ignores its deadline, commits
		return wrapperspb.String("late"), nil
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	a := r47Call(ctx, cc, r47Do, "d1", "x")
	if status.Code(a.err) != codes.DeadlineExceeded {
		t.Fatalf("first: %v", a.err)
	}
	// A retry while it still runs.
	b := r47Call(context.Background(), cc, r47Do, "d1", "x")
	pb := b.trailer.Get("grpc-retry-pushback-ms")
	if status.Code(b.err) != codes.Aborted || len(pb) != 1 || pb[0] != "1000" {
		t.Errorf("repeat in flight: %v %v", b.err, b.trailer)
	}
	time.Sleep(300 * time.Millisecond)
	c := r47Call(context.Background(), cc, r47Do, "d1", "x")
	if c.err != nil || c.resp.GetValue() != "late" || srv.runs.Load() != 1 {
		t.Errorf("after: %v %q runs %d", c.err, c.resp.GetValue(), srv.runs.Load())
	}
}

func TestReview47HostileKeysOverTheWire(t *testing.T) {
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		return wrapperspb.String("ok"), nil
	}, nil)
	cases := []struct {
		name string
		md   []string
		want codes.Code
	}{
		{"255", []string{"idempotency-key", strings.Repeat("k", 255)}, codes.OK},
		{"256", []string{"idempotency-key", strings.Repeat("k", 256)}, codes.InvalidArgument},
		{"100KiB", []string{"idempotency-key", strings.Repeat("k", 100<<10)}, codes.InvalidArgument},
		{"two values", []string{"idempotency-key", "a", "idempotency-key", "b"}, codes.InvalidArgument},
		{"quoted", []string{"idempotency-key", `"a b"`}, codes.OK},
		{"empty", []string{"idempotency-key", ""}, codes.InvalidArgument},
		{"spaces", []string{"idempotency-key", "   "}, codes.InvalidArgument},
	}
	for _, c := range cases {
		ctx := metadata.AppendToOutgoingContext(context.Background(), c.md...)
		a := r47Call(ctx, cc, r47Do, "", "x")
		if status.Code(a.err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, a.err, c.want)
		}
	}
	// A binary key is no key: the call runs unprotected, each time.
	before := srv.runs.Load()
	for range 2 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key-bin", "\x00\x01")
		_ = r47Call(ctx, cc, r47Do, "", "x")
	}
	t.Logf("idempotency-key-bin: ran %d times of 2", srv.runs.Load()-before)
}

// Keys no grpc-go client sends (invalid UTF-8, control bytes, uppercase
// metadata names from a hand-built MD), given to the interceptor directly.
func TestReview47HostileKeysDirect(t *testing.T) {
	icpt := grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())
	runs := 0
	h := func(ctx context.Context, req any) (any, error) { runs++; return wrapperspb.String("ok"), nil }
	info := &grpc.UnaryServerInfo{FullMethod: r47Do}
	for _, k := range []string{"\xff\xfe", "a\x00b", "a\nb", "\x7f", strings.Repeat("\xff", 1<<20)} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"idempotency-key": {k}})
		_, err := icpt(ctx, wrapperspb.String("x"), info, h)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%q: %v", k[:min(len(k), 8)], err)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"Idempotency-Key": {"up"}})
	for range 2 {
		if _, err := icpt(ctx, wrapperspb.String("x"), info, h); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Errorf("uppercase metadata name: ran %d times", runs)
	}
	// Outside a server (no transport stream): a keyed call and its replay.
	ctx = metadata.NewIncomingContext(context.Background(), metadata.MD{"idempotency-key": {"nostream"}})
	r1, err1 := icpt(ctx, wrapperspb.String("x"), info, h)
	r2, err2 := icpt(ctx, wrapperspb.String("x"), info, h)
	if err1 != nil || err2 != nil || r1.(*wrapperspb.StringValue).GetValue() != r2.(*wrapperspb.StringValue).GetValue() {
		t.Errorf("no stream: %v %v", err1, err2)
	}
}

func TestReview47StreamsPassThrough(t *testing.T) {
	srv, cc := r47Idem(t, nil, nil, grpcidempotency.SharedKeys(), grpcidempotency.Required())
	for range 2 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "s1")
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, r47Stream)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SendMsg(wrapperspb.String("m"))
		_ = st.CloseSend()
		out := new(wrapperspb.StringValue)
		if err := st.RecvMsg(out); err != nil || out.GetValue() != "m" {
			t.Errorf("stream: %v %q", err, out.GetValue())
		}
	}
	if srv.runs.Load() != 2 {
		t.Errorf("streams ran %d times", srv.runs.Load())
	}
}

func TestReview47OneKeyTwoMethodsAndBodies(t *testing.T) {
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		return wrapperspb.String("r:" + in.GetValue()), nil
	}, nil)
	a := r47Call(context.Background(), cc, r47Do, "m1", "x")
	b := r47Call(context.Background(), cc, r47Other, "m1", "x")
	c := r47Call(context.Background(), cc, r47Do, "m1", "y")
	if a.err != nil || status.Code(b.err) != codes.FailedPrecondition || status.Code(c.err) != codes.FailedPrecondition || srv.runs.Load() != 1 {
		t.Errorf("%v / %v / %v runs %d", a.err, b.err, c.err, srv.runs.Load())
	}
}

// Scope: a keyed call with no identity is refused; two identities do not
// share keys.
func TestReview47Scope(t *testing.T) {
	srv, cc := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return wrapperspb.String(strings.Join(md.Get("user"), ",")), nil
	}, nil, grpcidempotency.Scope(func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("user"); len(v) == 1 {
			return v[0]
		}
		return ""
	}))
	a := r47Call(context.Background(), cc, r47Do, "s", "x", "user", "alice")
	b := r47Call(context.Background(), cc, r47Do, "s", "x", "user", "bob")
	c := r47Call(context.Background(), cc, r47Do, "s", "x")
	if a.resp.GetValue() != "alice" || b.resp.GetValue() != "bob" || status.Code(c.err) != codes.Unauthenticated || srv.runs.Load() != 2 {
		t.Errorf("%q %q %v runs %d", a.resp.GetValue(), b.resp.GetValue(), c.err, srv.runs.Load())
	}
}
