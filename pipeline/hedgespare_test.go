package pipeline

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// spareOf returns p's spare hedged call of result type T, nil if none.
func spareOf[T any](p *Pipeline) *hedged[T] {
	s := p.cfg.spare.h.Load()
	if s == nil {
		return nil
	}
	h, _ := (*s).(*hedged[T])
	return h
}

// A call that sent no hedge leaves its memory to the pipeline's next call,
// zeroed: nothing of the call (its operation, its contexts, its pipeline)
// is kept; the next call of its result type takes it.
func TestAHedgedCallThatSentNoHedgeLeavesItsMemoryZeroed(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	op := func(context.Context) (int, error) { return 1, nil }
	if _, err := Do(context.Background(), p, op); err != nil {
		t.Fatal(err)
	}
	h := spareOf[int](p)
	if h == nil {
		t.Fatal("a call that sent no hedge left no spare")
	}
	if !reflect.DeepEqual(h, &hedged[int]{self: h}) {
		t.Errorf("the spare keeps something of its call: %+v", h)
	}
	if _, err := Do(context.Background(), p, op); err != nil {
		t.Fatal(err)
	}
	if spareOf[int](p) != h {
		t.Error("the next call did not take the spare, and left another")
	}
}

// A call whose race sent a hedge leaves nothing: the hedge's goroutine,
// and the losers' drain, may still use the call's state and race after it
// returned.
func TestAHedgedCallThatSentAHedgeLeavesNoSpare(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
	release := make(chan struct{})
	var hedges sync.WaitGroup
	hedges.Add(1)
	res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if p.IsHedge(ctx) {
			defer hedges.Done()
			<-release // a loser still running once the call returned
			return 2, nil
		}
		time.Sleep(50 * time.Millisecond)
		return 1, nil
	})
	if err != nil || res != 1 {
		t.Fatalf("got %d, %v; want the first attempt's 1", res, err)
	}
	if h := spareOf[int](p); h != nil {
		t.Error("a call whose race sent a hedge left its memory for the next call while the hedge ran")
	}
	close(release)
	hedges.Wait()
	time.Sleep(10 * time.Millisecond) // the losers' drain
}

// The first attempt's context, which its operation may keep past the
// call, is its own: the calls that reuse the race's memory after it do
// not change it, and it stays canceled, with its values.
func TestAKeptFirstContextOutlivesTheReuseOfItsRace(t *testing.T) {
	type key struct{}
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	var kept context.Context
	ctx := context.WithValue(context.Background(), key{}, "first")
	if _, err := Do(ctx, p, func(ctx context.Context) (int, error) {
		kept = ctx
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		other := context.WithValue(context.Background(), key{}, "other")
		if _, err := Do(other, p, func(ctx context.Context) (int, error) {
			if kept == ctx {
				t.Fatalf("call %d was given the first call's context", i)
			}
			return 1, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(kept.Err(), context.Canceled) {
			t.Fatalf("after call %d, the kept context is not canceled: %v", i, kept.Err())
		}
		if v := kept.Value(key{}); v != "first" {
			t.Fatalf("after call %d, the kept context's value is %v", i, v)
		}
	}
}

// Calls of different result types through one pipeline each get memory
// of their own type: the spare stays with the type that took it first, and
// the other type's calls allocate, once each, as without a spare.
func TestHedgedCallsOfTwoResultTypesShareAPipeline(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	for i := range 20 {
		n, err := Do(context.Background(), p, func(context.Context) (int, error) { return i, nil })
		if err != nil || n != i {
			t.Fatalf("int call %d: got %d, %v", i, n, err)
		}
		s, err := Do(context.Background(), p, func(context.Context) (string, error) { return "s", nil })
		if err != nil || s != "s" {
			t.Fatalf("string call %d: got %q, %v", i, s, err)
		}
	}
	if spareOf[int](p) == nil {
		t.Error("the first type's calls left no spare")
	}
	if spareOf[string](p) != nil {
		t.Error("a call of another type took the first type's spare")
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
		_, _ = Do(ctx, p, func(context.Context) (string, error) { return "s", nil })
	})
	if allocs > 2 {
		t.Errorf("an int call and a string call take %v allocations; want 2: the int call's context, the string call's memory (the other type's spare left where it is)", allocs)
	}
}

// Many calls at once through one pipeline, some hedged and some not, a
// few streamed: each gets its own answer, whatever the calls before it
// left to the pipeline, and the hedges of a call that returned do not
// reach the calls that took its memory.
func TestTheSpareUnderConcurrentCallsSomeHedged(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(100*time.Microsecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				want := g*1000 + i
				op := func(ctx context.Context) (int, error) {
					if i%3 == 0 { // slow: hedged
						time.Sleep(300 * time.Microsecond)
					}
					return want, nil
				}
				var got int
				var err error
				if i%7 == 0 {
					var release func()
					got, release, err = DoStream(context.Background(), p, op)
					release()
				} else {
					got, err = Do(context.Background(), p, op)
				}
				if err != nil || got != want {
					t.Errorf("call %d of goroutine %d: got %d, %v; want %d", i, g, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond) // the losers' drains
}

// A call of a large result type leaves nothing: a pipeline keeps at most
// a small call's memory.
func TestAHedgedCallOfALargeResultLeavesNoSpare(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	if _, err := Do(context.Background(), p, func(context.Context) ([1 << 12]byte, error) { return [1 << 12]byte{}, nil }); err != nil {
		t.Fatal(err)
	}
	if spareOf[[1 << 12]byte](p) != nil {
		t.Error("a call of a 4 KiB result left its memory, three times that, to the pipeline")
	}
}
