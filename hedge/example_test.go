package hedge_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// The first attempt hangs: 20 ms later a twin is sent, and its answer is
// the call's; the slow attempt is canceled.
func Example() {
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(20 * time.Millisecond))))
	var attempts atomic.Int64
	got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		if attempts.Add(1) == 1 {
			<-ctx.Done() // a slow replica
			return "", ctx.Err()
		}
		return "from the twin", nil
	})
	fmt.Println(got, err, "- attempts:", attempts.Load())
	// Output: from the twin <nil> - attempts: 2
}
