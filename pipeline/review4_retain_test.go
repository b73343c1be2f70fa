package pipeline

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/resiliencekit/resiliencekit/hedge"
)

type review4Key struct{}

// A call that never hedged is over once Do returns: what its operation
// captured and the context it was given are the caller's to drop. In a
// design since taken out, a race left in a sync.Pool kept r.c (op, k, s),
// r.ctx and r.first (with its lazyCtx, whose parent is the caller's
// context) until a later race of the same result type reused it, or two
// GCs passed: one GC after the call, the request's data was still
// reachable. The pipeline's spare is zeroed as the call leaves it.
func TestReview4RaceKeepsCallDataPastGC(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	opData := weak.Make(func() *[1 << 20]byte {
		big := new([1 << 20]byte)
		ctx := context.WithValue(context.Background(), review4Key{}, "request")
		_, err := Do(ctx, p, func(context.Context) (int, error) { return int(big[0]), nil })
		if err != nil {
			t.Fatal(err)
		}
		return big
	}())
	ctxData := weak.Make(func() *[1 << 20]byte {
		big := new([1 << 20]byte)
		ctx := context.WithValue(context.Background(), review4Key{}, big)
		_, err := Do(ctx, p, func(context.Context) (string, error) { return "", nil })
		if err != nil {
			t.Fatal(err)
		}
		return big
	}())
	runtime.GC()
	if opData.Value() != nil {
		t.Errorf("one GC after the call: the 1 MiB its operation captured is still reachable (pooled race's r.c.op)")
	}
	if ctxData.Value() != nil {
		t.Errorf("one GC after the call: the 1 MiB its context carried is still reachable (pooled race's r.ctx / r.first)")
	}
	runtime.KeepAlive(p)
}

// Quantified: a burst of concurrent calls, each capturing 1 MiB, none
// hedged. After the burst and one GC, what is still live.
func TestReview4RaceRetentionAfterBurst(t *testing.T) {
	const n = 64
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	func() {
		var wg sync.WaitGroup
		start := make(chan struct{})
		var ready sync.WaitGroup
		for range n {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				big := make([]byte, 1<<20)
				ready.Done()
				_, _ = Do(context.Background(), p, func(context.Context) (int, error) {
					<-start // all in flight at once
					return int(big[0]), nil
				})
			}()
		}
		ready.Wait()
		time.Sleep(20 * time.Millisecond)
		close(start)
		wg.Wait()
	}()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(base.HeapAlloc)
	t.Logf("after %d concurrent calls of 1 MiB each and one GC: %.1f MiB still live", n, float64(live)/(1<<20))
	if live > 8<<20 {
		t.Errorf("%.1f MiB of finished calls' data still live after a GC (%d calls of 1 MiB)", float64(live)/(1<<20), n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("after a second GC: %.1f MiB", float64(int64(after.HeapAlloc)-int64(base.HeapAlloc))/(1<<20))
	runtime.KeepAlive(p)
}

// A Pipeline nothing refers to is collectable after a GC (its breaker's
// listener relies on it: runtime.AddCleanup in New). In a design since
// taken out, its pooled races referred to it (r.c.p), and the pool hung
// off its hedgeTimers, which a shard's time.Timer, left set for up to one
// hedging delay after its races answered, and sync's global pool list
// kept: the pipeline survived a GC.
func TestReview4RaceKeepsPipelinePastGC(t *testing.T) {
	made := func(opts ...CallOption) weak.Pointer[Pipeline] {
		p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }, opts...)
		return weak.Make(p)
	}
	control := made(SingleAttempt()) // not hedged: no race, nothing pooled
	wp := made()
	runtime.GC()
	if control.Value() != nil {
		t.Fatal("control: a pipeline whose call made no race survives a GC; the test proves nothing")
	}
	if wp.Value() != nil {
		t.Error("one GC after its last call, an unreferenced hedging Pipeline is still reachable (its pooled race)")
	}
	runtime.GC()
	t.Logf("after a second GC, collected: %v", wp.Value() == nil)
}
