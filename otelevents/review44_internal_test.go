package otelevents

import (
	"context"
	"fmt"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The Tracer keeps at most maxDependencies names, even when many new
// names come at once.
func TestReview44_TracerDependencyCap(t *testing.T) {
	worst := 0
	for range 20 {
		tr := NewTracer(sdktrace.NewTracerProvider())
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 20 {
					_, c := tr.StartCall(context.Background(), fmt.Sprintf("n%d-%d", g, i))
					c.End(nil)
				}
			}()
		}
		close(start)
		wg.Wait()
		worst = max(worst, r44Kept(tr))
	}
	if worst > maxDependencies {
		t.Errorf("kept %d dependencies, cap %d", worst, maxDependencies)
	}
}

// At the cap's edge: 250 names kept, then 64 new ones at once.
func TestReview44_TracerDependencyCapEdge(t *testing.T) {
	worst := 0
	for range 300 {
		tr := NewTracer(sdktrace.NewTracerProvider())
		for i := range maxDependencies - 6 {
			tr.dependency(fmt.Sprint("pre", i))
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tr.dependency(fmt.Sprint("new", g))
			}()
		}
		close(start)
		wg.Wait()
		worst = max(worst, r44Kept(tr))
	}
	if worst > maxDependencies {
		t.Errorf("kept %d dependencies, cap %d", worst, maxDependencies)
	}
}

// r44Kept returns how many dependencies tr keeps.
func r44Kept(tr *Tracer) int {
	n := 0
	tr.deps.Range(func(any, any) bool { n++; return true })
	return n
}
