package slogevents_test

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

// A pipeline's events, logged: at Info, a breaker's state changes and the
// calls that gave up; at Debug, every attempt and retry too.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	}))
	p := pipeline.New(
		pipeline.WithBreaker(breaker.New("payments", breaker.ConsecutiveFailures(1))),
		pipeline.WithListener(slogevents.New(logger)),
	)
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("connection refused") })
	// Output: level=WARN msg="resilience state_change" dependency=payments from=closed to=open
}
