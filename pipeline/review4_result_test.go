package pipeline

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// The result of a call that never hedged is not kept by its race's memory
// once reused (the pipeline's spare, zeroed; a sync.Pool in a design
// since taken out).
func TestReview4RaceKeepsNoResult(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(time.Hour))))
	w := func() weak.Pointer[[1 << 20]byte] {
		res, err := Do(context.Background(), p, func(context.Context) (*[1 << 20]byte, error) { return new([1 << 20]byte), nil })
		if err != nil {
			t.Fatal(err)
		}
		return weak.Make(res)
	}()
	runtime.GC()
	if w.Value() != nil {
		t.Error("the result of a finished call is reachable after a GC")
	}
	runtime.KeepAlive(p)
}
