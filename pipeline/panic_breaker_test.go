package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestPanickingCallsDoNotOpenTheBreakerForHealthyOnes: an operation that
// panics or calls runtime.Goexit for some requests (a caller's bug that a
// server's recover keeps alive), whether its first attempt or a retry or a
// hedge does, never opens the breaker that the healthy requests share:
// each of them still completes, as it would with a plain client.
func TestPanickingCallsDoNotOpenTheBreakerForHealthyOnes(t *testing.T) {
	errDown := errors.New("503")
	for _, c := range []struct {
		name string
		opts []pipeline.Option
		op   func(n int) error // attempt n of a buggy call, from 1
	}{
		{"panic", nil, func(int) error { panic("the caller's bug") }},
		{"Goexit", nil, func(int) error { runtime.Goexit(); return nil }},
		{"panic in a retry", nil, func(n int) error {
			if n == 1 {
				return errDown
			}
			panic("the caller's bug")
		}},
		{"panic in a hedge", []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1)))},
			func(n int) error {
				if n == 1 {
					time.Sleep(time.Second)
					return nil
				}
				panic("the caller's bug")
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep")
				p := pipeline.New(append([]pipeline.Option{pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))}, c.opts...)...)
				for range 20 { // in a row: 5 failures would open it
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { _ = recover() }()
						var n atomic.Int32 // the first attempt and its hedge run at once
						_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
							return 0, c.op(int(n.Add(1)))
						})
					}()
					<-done
				}
				assert.Equal(t, resilience.StateClosed, b.State())
				assert.Zero(t, b.Counts().TotalFailures)
				for range 5 {
					_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
					require.NoError(t, err, "a healthy call after the buggy ones")
				}
			})
		})
	}
}
