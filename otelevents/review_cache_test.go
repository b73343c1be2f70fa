package otelevents

import (
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
)

// Many dependencies interleaved from many goroutines: the one-entry cache
// always answers the dependency asked for, and one dep per name.
func TestEdges28CacheInterleaved(t *testing.T) {
	l, err := New(noop.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seen := sync.Map{}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				name := fmt.Sprint("dep", (i*7+g)%13)
				d := l.of(name)
				if d.name != name {
					t.Errorf("of(%q) = dep %q", name, d.name)
					return
				}
				if prev, loaded := seen.LoadOrStore(name, d); loaded && prev.(*dep) != d {
					t.Errorf("two deps for %q", name)
					return
				}
			}
		}()
	}
	wg.Wait()
}
