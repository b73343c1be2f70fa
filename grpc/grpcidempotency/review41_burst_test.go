package grpcidempotency_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r41Slow is a MemoryStore whose Begin takes delay: simultaneous repeats
// meet while one is being claimed.
type r41Slow struct {
	*idempotency.MemoryStore
	delay time.Duration
}

func (s r41Slow) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	time.Sleep(s.delay)
	return s.MemoryStore.Begin(ctx, key, claim, lease)
}

// A burst of the same keyed call after the first ended: all replayed, the
// same answer and the replay header, one run; with calls of another
// payload mixed in, those get FAILED_PRECONDITION and the right ones are
// still replayed.
func TestReview41_GRPCBurstAfterEnd(t *testing.T) {
	g := idempotency.NewGuard(r41Slow{idempotency.NewMemoryStore(0), 30 * time.Millisecond}, idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(g, grpcidempotency.SharedKeys())))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	cc, err := grpctest.Dial(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := grpctest.NewClient(cc)
	ctx := withKey(context.Background(), "burst-1")
	first, err := client.Create(ctx, "a")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var bad, wrongOK atomic.Int64
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := "a"
			if i%50 == 7 {
				in = "other payload"
			}
			var hdr metadata.MD
			out, err := client.Create(ctx, in, grpc.Header(&hdr))
			switch {
			case in == "a" && (err != nil || out != first || len(hdr.Get(grpcidempotency.ReplayedKey)) == 0):
				bad.Add(1)
				t.Logf("right payload: %q %v", out, err)
			case in != "a" && err == nil:
				wrongOK.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || wrongOK.Load() != 0 || srv.Count(grpctest.Create) != 1 {
		t.Errorf("right payload not replayed %d, wrong payload answered %d, runs %d", bad.Load(), wrongOK.Load(), srv.Count(grpctest.Create))
	}
}
