package pipeline

import (
	"context"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// hedge.MaxExtra(n) accepts any n >= 1, and a race makes its results
// channel with capacity r.extra = min(n, MaxInt32) when its first hedge is
// sent: on the shared timer's goroutine. A call that hedges once under
// MaxExtra(math.MaxInt) asks for a channel of 2^31-1 outcomes (~120 GB for
// an int result): the process dies (or, with overcommit, maps it) from the
// timer's goroutine, where nothing can recover it. MaxExtra(1<<20) with a
// 1 KiB result costs 1 GiB per hedged call.
func TestReview4HugeMaxExtraHedgeAllocatesChannelOfExtra(t *testing.T) {
	if os.Getenv("REVIEW4_CHILD") == "1" {
		p := New(WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))))
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if !p.IsHedge(ctx) {
				time.Sleep(50 * time.Millisecond)
			}
			return 1, nil
		})
		if err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview4HugeMaxExtraHedgeAllocatesChannelOfExtra$")
	cmd.Env = append(os.Environ(), "REVIEW4_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "fatal") || strings.Contains(l, "makechan") || strings.Contains(l, "pipeline.") {
				keep = append(keep, l)
			}
		}
		t.Fatalf("one hedged call under MaxExtra(math.MaxInt) killed the process: %v\n%s", err, strings.Join(keep[:min(len(keep), 8)], "\n"))
	}
}

// The same at a size that does not kill: the memory one hedged call takes.
func TestReview4LargeMaxExtraCostsPerHedgedCall(t *testing.T) {
	const n = 1 << 18
	p := New(WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(n), hedge.MaxShare(1))))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Do(context.Background(), p, func(ctx context.Context) ([1024]byte, error) {
		if !p.IsHedge(ctx) {
			time.Sleep(20 * time.Millisecond)
		}
		return [1024]byte{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	got := after.TotalAlloc - before.TotalAlloc
	if got > 1<<20 {
		t.Fatalf("one call with one hedge sent allocated %d MiB (MaxExtra(%d), 1 KiB result)", got>>20, n)
	}
}
