package registry_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

// Names and Snapshot agree on the pipelines registered: a pipeline
// collected (its weak pointer nil) is in neither, cleanup run or not.
func TestR124NamesAgreesWithSnapshot(t *testing.T) {
	r := registry.New()
	seen := 0
	for i := range 200 {
		func() {
			_, err := r.AddPipeline(pipeline.New(pipeline.WithName(fmt.Sprint("p", i))))
			if err != nil {
				t.Fatal(err)
			}
		}()
		runtime.GC()
		_, names := r.Names()
		snap := len(r.Snapshot().Pipelines)
		if len(names) != snap {
			seen++
		}
	}
	if seen > 0 {
		t.Errorf("Names listed %d times more pipelines than Snapshot (collected, cleanup not yet run)", seen)
	}
}
