package pipeline

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"go.uber.org/goleak"
)

// The breaker counts a hedged group as one call: first fails, hedge wins -> one success.
func TestReview67BreakerCountsGroup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b := breaker.New("r67")
	p := New(WithBreaker(b), WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	for i := range 10 {
		var n atomic.Int32
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond)
				return 0, errors.New("500")
			}
			time.Sleep(20 * time.Millisecond)
			return 1, nil
		})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	c := b.Counts()
	t.Logf("counts %+v", c)
	if c.TotalFailures != 0 || c.TotalSuccesses != 10 {
		t.Errorf("breaker counted %+v, want 10 successes", c)
	}
}

// First attempt panics / Goexits while a hedge runs: the panic reaches the caller,
// the hedge is canceled, nothing leaks.
func TestReview67FirstPanicsWithHedgeOut(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
	hedgeCanceled := make(chan struct{})
	func() {
		defer func() {
			if r := recover(); r != "first" {
				t.Errorf("recovered %v", r)
			}
		}()
		var n atomic.Int32
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(20 * time.Millisecond)
				panic("first")
			}
			<-ctx.Done()
			close(hedgeCanceled)
			return 0, ctx.Err()
		})
	}()
	select {
	case <-hedgeCanceled:
	case <-time.After(2 * time.Second):
		t.Fatal("hedge not canceled after first attempt panicked")
	}
	done := make(chan struct{})
	hc2 := make(chan struct{})
	go func() {
		defer close(done)
		var n atomic.Int32
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(20 * time.Millisecond)
				runtime.Goexit()
			}
			<-ctx.Done()
			close(hc2)
			return 0, ctx.Err()
		})
		t.Error("Do returned after Goexit")
	}()
	<-done
	select {
	case <-hc2:
	case <-time.After(2 * time.Second):
		t.Fatal("hedge not canceled after Goexit")
	}
	time.Sleep(20 * time.Millisecond)
}

// The caller cancels while the first attempt and a hedge run.
func TestReview67CallerCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := New(WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(20))))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	var n atomic.Int32
	_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
		n.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	t.Logf("attempts %d", n.Load())
	time.Sleep(20 * time.Millisecond)
}

// Real pipeline, real time, thousands of concurrent calls: no hedge before its delay.
type id67 struct{}
type rec67 struct {
	first, hedge time.Time
	mu           sync.Mutex
}

func TestReview67DelayHonouredConcurrent(t *testing.T) {
	const d = 8 * time.Millisecond
	p := New(WithHedging(hedge.New(hedge.Delay(d), hedge.MaxShare(1))))
	var wg sync.WaitGroup
	recs := make([]*rec67, 3000)
	for i := range recs {
		recs[i] = &rec67{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(context.Background(), id67{}, recs[i])
			recs[i].first = time.Now() // before Do: the race is armed after this
			Do(ctx, p, func(ctx context.Context) (int, error) {
				r := ctx.Value(id67{}).(*rec67)
				r.mu.Lock()
				if p.IsHedge(ctx) {
					if r.hedge.IsZero() {
						r.hedge = time.Now()
					}
				}
				r.mu.Unlock()
				select {
				case <-time.After(time.Duration(i%20) * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
		}()
	}
	wg.Wait()
	hedged := 0
	for i, r := range recs {
		if r.hedge.IsZero() {
			continue
		}
		hedged++
		if gap := r.hedge.Sub(r.first); gap < d {
			t.Errorf("call %d hedged %v after Do began, delay %v", i, gap, d)
		}
	}
	t.Logf("%d of %d hedged", hedged, len(recs))
}

// Pipeline-level MaxShare for a quiet service in fake time, with retries (retries do not fund).
func TestReview67PipelineQuietShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(0.1), hedge.MaxExtra(3))))
		start := time.Now()
		var hedgesAt []time.Duration
		var mu sync.Mutex
		calls := 0
		for range 60 {
			calls++
			Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					mu.Lock()
					hedgesAt = append(hedgesAt, time.Since(start))
					mu.Unlock()
				}
				select {
				case <-time.After(100 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			time.Sleep(1400 * time.Millisecond)
		}
		per := map[time.Duration]int{}
		for _, at := range hedgesAt {
			per[at.Truncate(10*time.Second)]++
		}
		t.Logf("%d calls, %d hedges; per aligned 10 s: %v", calls, len(hedgesAt), per)
		for w, n := range per {
			if n > 2 {
				t.Errorf("window %v: %d hedges for ~7 calls at 10%%", w, n)
			}
		}
	})
}
