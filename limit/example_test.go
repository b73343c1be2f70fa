package limit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A bulkhead of one call in flight: a second call at the same time is
// refused at once (or, with MaxWaiting, queued within its time budget).
func Example() {
	l := limit.NewFixed(1)
	p := pipeline.New(pipeline.WithLimit(l))

	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			close(inside)
			<-release
			return 1, nil
		})
	}()
	<-inside
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 2, nil })
	fmt.Println("second call refused:", errors.Is(err, limit.ErrLimited), "- in flight:", l.InFlight())
	close(release)
	<-done
	// Output: second call refused: true - in flight: 1
}
