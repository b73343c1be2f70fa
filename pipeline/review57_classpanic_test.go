package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review57NilErr struct{ inner error }

func (e *review57NilErr) Error() string { return e.inner.Error() }
func (e *review57NilErr) Unwrap() error { return e.inner }

// An operation returns a typed nil error (a caller's bug). The call may
// panic, but once the caller recovered, the next call through the
// pipeline, whose operation is healthy, must complete.
func TestReview57PanickingErrorLeavesLimiterLocked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []pipeline.Option
	}{
		{"aimd", []pipeline.Option{pipeline.WithLimit(limit.NewAIMD())}},
		{"aimd+breaker+retry", []pipeline.Option{
			pipeline.WithBreaker(breaker.New("r57")),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))),
			pipeline.WithLimit(limit.NewAIMD()),
		}},
		{"fixed", []pipeline.Option{pipeline.WithLimit(limit.NewFixed(4))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pipeline.New(tc.opts...)
			func() {
				defer func() { t.Logf("first call panicked: %v", recover()) }()
				_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					var e *review57NilErr
					return 0, e
				})
				t.Logf("first call returned %v", err != nil)
			}()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("healthy call after: %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("a healthy call hangs past its own 1 s deadline after an earlier operation returned an error whose methods panic: the limiter's mutex is left locked")
			}
		})
	}
}
