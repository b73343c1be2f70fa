package grpcidempotency_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// Several replicas, each its own guard, share one store; many goroutines
// send the same keyed call to all of them at once, over and over, until
// each has an answer. The handler must run once per key, and every
// answer (first or replay) must be the same.
func TestReview47ExactlyOnceAcrossReplicas(t *testing.T) {
	shared := idempotency.NewMemoryStore(0)
	var runs sync.Map // key -> *atomic.Int64
	h := func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		k := md.Get("idempotency-key")[0]
		n, _ := runs.LoadOrStore(k, new(atomic.Int64))
		c := n.(*atomic.Int64).Add(1)
		time.Sleep(time.Duration(len(k)%7) * time.Millisecond)
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-run", fmt.Sprint(c)))
		return wrapperspb.String(fmt.Sprintf("%s#%d", in.GetValue(), c)), nil
	}
	const replicas = 4
	var ccs []*grpc.ClientConn
	for range replicas {
		g := idempotency.NewGuard(shared)
		srv := r47Start(t, h, grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(g, grpcidempotency.SharedKeys())))
		ccs = append(ccs, r47Dial(t, srv.addr))
	}
	const keys, callers = 30, 12
	var wg sync.WaitGroup
	answers := make([][]string, keys)
	var mu sync.Mutex
	var aborted atomic.Int64
	for k := range keys {
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("key-%d", k)
				for i := 0; ; i++ {
					a := r47Call(context.Background(), ccs[(c+i)%replicas], r47Do, key, "v")
					if status.Code(a.err) == codes.Aborted {
						aborted.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					if a.err != nil {
						t.Errorf("%s: %v", key, a.err)
						return
					}
					mu.Lock()
					answers[k] = append(answers[k], a.resp.GetValue()+"/"+fmt.Sprint(a.header.Get("x-run")))
					mu.Unlock()
					return
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("aborted repeats: %d", aborted.Load())
	for k := range keys {
		n, _ := runs.Load(fmt.Sprintf("key-%d", k))
		if got := n.(*atomic.Int64).Load(); got != 1 {
			t.Errorf("key-%d ran %d times", k, got)
		}
		for _, a := range answers[k] {
			if a != answers[k][0] {
				t.Errorf("key-%d: answers differ: %q vs %q", k, a, answers[k][0])
				break
			}
		}
	}
}
