package throttle_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A dependency that refuses every attempt: after a while the throttle
// refuses most attempts itself, before they are sent, at no cost to it.
func Example() {
	th := throttle.New() // K = 2, a 10 s window
	p := pipeline.New(pipeline.WithThrottle(th))
	sent := 0
	refuse := func(context.Context) (int, error) { sent++; return 0, errors.New("503 overloaded") }

	throttled := 0
	for range 200 {
		if _, err := pipeline.Do(context.Background(), p, refuse); errors.Is(err, throttle.ErrThrottled) {
			throttled++
		}
	}
	fmt.Println("most attempts refused locally:", throttled > 100, "- the dependency still gets a trickle:", sent > 0)
	// Output: most attempts refused locally: true - the dependency still gets a trickle: true
}
