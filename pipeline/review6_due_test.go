package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// A due hedge is still sent when the first attempt fails while another
// hedge is out (the reverted attempt's finding 1); no retry stage.
func TestZRevDueHedgeAfterFirstFails(t *testing.T) {
	const d = 40 * time.Millisecond
	for i := 0; i < 5; i++ {
		p := New(WithHedging(hedge.New(hedge.Delay(d), hedge.MaxShare(1), hedge.MaxExtra(2))))
		Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil }) // leaves a spare

		start := time.Now()
		res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			switch {
			case !p.IsHedge(ctx): // first: fails at 1.5d
				time.Sleep(d * 3 / 2)
				return 0, errors.New("first failed")
			default:

				if time.Since(start) < d*3/2 { // hedge 1: fails late, at 3d
					time.Sleep(2 * d)
					return 0, errors.New("hedge 1 failed")
				}
				return 3, nil // hedge 2 at 2d: succeeds
			}
		})
		if err != nil || res != 3 {
			t.Fatalf("run %d: got %d, %v; want hedge 2's 3", i, res, err)
		}
	}
}
