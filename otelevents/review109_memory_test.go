package otelevents_test

import (
	"errors"
	"runtime"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The Listener's doc: it keeps each dependency name it has seen, "about
// 2 KB each".
func TestReview109MemoryPerDependency(t *testing.T) {
	for _, sdk := range []bool{false, true} {
		t.Run(map[bool]string{false: "noop", true: "sdk"}[sdk], func(t *testing.T) {
			var l *otelevents.Listener
			if sdk {
				l, _ = r109New(t)
			} else {
				var err error
				if l, err = otelevents.New(noop.NewMeterProvider()); err != nil {
					t.Fatal(err)
				}
			}
			const n = 4000
			names := make([]string, n)
			for i := range names {
				names[i] = "dependency-" + strconv.Itoa(i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			fail := errors.New("x")
			for _, name := range names {
				l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: name, Err: fail})
				l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventAttempt, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: name})
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			per := float64(after.HeapAlloc-before.HeapAlloc) / n
			t.Logf("%.0f bytes a dependency", per)
			runtime.KeepAlive(l)
			if !sdk && (per > 3000 || per < 1000) { // the SDK's own data points come on top (about as much again)
				t.Errorf("%.0f bytes a dependency, documented as about 2 KB", per)
			}
		})
	}
}
