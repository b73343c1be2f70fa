package grpcclient_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var review18Msgs = []string{
	`header key "X" contains illegal characters not in [0-9a-z-_.]`,
	"there is an empty key in the header",
	`grpc: Compressor is not installed for requested grpc-encoding "zz"`,
	"no codec registered for content-subtype zz",
	"transport: per-RPC creds failed due to error: boom",
}

type review18Call func(c *grpctest.Client, ctx context.Context) error

var review18Calls = map[string]review18Call{
	"unary": func(c *grpctest.Client, ctx context.Context) error { _, err := c.Get(ctx, "x"); return err },
	"list":  func(c *grpctest.Client, ctx context.Context) error { _, err := c.List(ctx, "x"); return err },
	"upload": func(c *grpctest.Client, ctx context.Context) error {
		_, err := c.Upload(ctx, []string{"a", "b"})
		return err
	},
	"chat": func(c *grpctest.Client, ctx context.Context) error { _, err := c.Chat(ctx, []string{"a"}); return err },
}

var review18Methods = map[string]string{"unary": grpctest.Get, "list": grpctest.List, "upload": grpctest.Upload, "chat": grpctest.Chat}

// (a) a server-made INTERNAL in grpc-go's client words counts, for each
// kind of call, trailers-only and after messages, hedged or not.
func TestReview18ServerInternalCounts(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		for kind, call := range review18Calls {
			for _, after := range []int{0, 1} {
				for _, msg := range review18Msgs {
					srv := start(t)
					srv.SetFault(review18Methods[kind], grpctest.Fault{Code: codes.Internal, Message: msg, After: after})
					b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
					popts := []pipeline.Option{pipeline.WithBreaker(b)}
					if hedged {
						popts = append(popts, pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(1))))
					}
					c, _ := dial(t, srv, grpcclient.WithPipeline(pipeline.New(popts...)))
					var last error
					for range 4 {
						last = call(c, t.Context())
					}
					if !assert.Equal(t, resilience.StateOpen, b.State(), "hedge=%v %s after=%d %q: %v (%v)", hedged, kind, after, msg, last, resilience.Classify(last)) {
						return
					}
				}
			}
		}
	}
}

// the caller's own: an upper-case key literal, for streams and hedged unary.
func TestReview18LocalStillRejected(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		for kind, call := range review18Calls {
			srv := start(t)
			b := breaker.New("dep", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Minute))
			popts := []pipeline.Option{pipeline.WithBreaker(b)}
			if hedged {
				popts = append(popts, pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(1))))
			}
			c, _ := dial(t, srv, grpcclient.WithPipeline(pipeline.New(popts...)))
			for _, ctx := range []context.Context{
				metadata.NewOutgoingContext(t.Context(), metadata.MD{"X-Up": {"a"}}),
				metadata.NewOutgoingContext(t.Context(), metadata.MD{"": {"a"}}),
				metadata.AppendToOutgoingContext(t.Context(), "x-v", "bad\n"),
			} {
				for range 3 {
					err := call(c, ctx)
					require.Error(t, err)
					assert.Equal(t, resilience.ClassRejected, resilience.Classify(err), "hedge=%v %s: %v", hedged, kind, err)
				}
			}
			for _, o := range []grpc.CallOption{grpc.UseCompressor("zz"), grpc.CallContentSubtype("zz")} {
				_, err := c.Get(t.Context(), "x", o)
				assert.Equal(t, resilience.ClassRejected, resilience.Classify(err), "hedge=%v %v", hedged, err)
				_, err = c.List(t.Context(), "x", o)
				assert.Equal(t, resilience.ClassRejected, resilience.Classify(err), "hedge=%v list %v", hedged, err)
			}
			assert.Equal(t, resilience.StateClosed, b.State(), "hedge=%v %s", hedged, kind)
		}
	}
}

// nilAddrConn is a connection whose RemoteAddr is nil, as some custom
// dialers' (in-memory pipes, tunnels, vsock wrappers) are.
type nilAddrConn struct{ net.Conn }

func (nilAddrConn) RemoteAddr() net.Addr { return nil }

// (a') a real stream over a connection whose RemoteAddr is nil: the server's
// INTERNAL "header key ..." is its own, not the caller's.
func TestReview18NilRemoteAddrServerInternal(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Internal, Message: `header key "X" contains illegal characters not in [0-9a-z-_.]`})
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Internal, Message: `header key "X" contains illegal characters not in [0-9a-z-_.]`})
	b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return nilAddrConn{c}, nil
	})
	opts := append(grpcclient.New(grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b)))).DialOptions(), dialer)
	cc, err := grpctest.Dial(srv.Addr, opts...)
	require.NoError(t, err)
	defer cc.Close()
	c := grpctest.NewClient(cc)
	var last error
	for range 4 {
		_, last = c.Get(t.Context(), "x")
	}
	t.Logf("unary: %v %v, server saw %d", resilience.Classify(last), last, srv.Count(grpctest.Get))
	assert.Equal(t, resilience.StateOpen, b.State(), "the server's INTERNAL over a conn without RemoteAddr")
	_ = status.Code
}

// (c) races: many concurrent unary calls and streams, some failing with a
// server INTERNAL, some canceled mid-stream, hedged and not.
func TestReview18PeerRace(t *testing.T) {
	srv := start(t)
	srv.Items = 50
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Internal, Message: "there is an empty key in the header", Delay: time.Millisecond})
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, After: 1})
	c, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))))
	c2, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				cl := c
				if (g+i)%2 == 0 {
					cl = c2
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*300*time.Microsecond+200*time.Microsecond)
				switch i % 5 {
				case 0:
					_, _ = cl.Get(ctx, "x")
				case 1:
					_, _ = cl.Create(context.Background(), "x")
				case 2:
					_, _ = cl.List(ctx, "x")
				case 3:
					_, _ = cl.Chat(context.Background(), []string{"a", "b"})
				case 4:
					st, err := cc18(cl, ctx)
					if err == nil {
						_ = st
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
}

func cc18(c *grpctest.Client, ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Microsecond); cancel() }()
	return c.List(ctx, "x")
}
