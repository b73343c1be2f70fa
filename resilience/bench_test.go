package resilience

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// BenchmarkClassify is the classification of errors of the shapes a
// call's attempt ends with, as the retry and the breaker ask it:
//
//	go test -run '^$' -bench Classify -benchmem ./resilience
func BenchmarkClassify(b *testing.B) {
	leaf := errors.New("down")
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Leaf", leaf},
		{"Wrapped", fmt.Errorf("get: %w", leaf)},
		{"Canceled", context.Canceled},
		{"Permanent", Permanent(leaf)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = Classify(c.err)
			}
		})
	}
}

var sink Class
