package otelevents_test

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

// TestReview61SampleDurations: the histogram's count is about calls/n,
// the counters exact, alone, with the registry's keeper, and with a
// listener that times every call.
func TestReview61SampleDurations(t *testing.T) {
	const calls = 200000
	for _, tc := range []struct {
		name string
		n    int
		reg  bool
		slog bool
		want float64 // expected fraction timed
	}{
		{"alone-10", 10, false, false, 0.1},
		{"alone-2", 2, false, false, 0.5},
		{"alone-huge", math.MaxInt, false, false, 0},
		{"alone-0", 0, false, false, 1},
		{"registry-100", 100, true, false, 0.01 + 1.0/64 - 0.01/64},
		{"slogdebug-100", 100, false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rd := r61New(t, otelevents.SampleDurations(tc.n))
			opts := []pipeline.Option{pipeline.WithName("d"), pipeline.WithListener(l)}
			if tc.slog {
				opts = append(opts, pipeline.WithListener(slogevents.New(slog.New(slog.DiscardHandler).With()))) // discard: Enabled false
				h := slog.NewTextHandler(discardW{}, &slog.HandlerOptions{Level: slog.LevelDebug})
				opts = append(opts, pipeline.WithListener(slogevents.New(slog.New(h))))
			}
			p := pipeline.New(opts...)
			if tc.reg {
				var err error
				if p, err = registry.New().AddPipeline(p); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range calls / 8 {
						_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
					}
				}()
			}
			wg.Wait()
			s := r61Sums(t, rd)
			if got := r61Total(s["resilience.calls"]); got != calls {
				t.Errorf("calls %d, want %d", got, calls)
			}
			h := float64(r61Total(s["resilience.call.duration"]))
			want := tc.want * calls
			sd := math.Sqrt(calls * tc.want * (1 - tc.want))
			t.Logf("histogram count %v, want about %v (sd %.1f)", h, want, sd)
			if math.Abs(h-want) > 5*sd+1 {
				t.Errorf("histogram count %v, want %v +- %v", h, want, 5*sd)
			}
		})
	}
}

type discardW struct{}

func (discardW) Write(p []byte) (int, error) { return len(p), nil }
