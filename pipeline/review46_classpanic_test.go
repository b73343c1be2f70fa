package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review46NilErr is an error type whose methods dereference their
// receiver: a typed nil *review46NilErr returned as an error (a classic Go
// bug) panics as it is classified.
type review46NilErr struct{ class resilience.Class }

func (e *review46NilErr) Error() string                     { return "nil err" }
func (e *review46NilErr) ResilienceClass() resilience.Class { return e.class }

// A hedge that fails with an error whose classification panics: the panic
// must reach the caller (as the first attempt's does, and as it did before
// the hedge's goroutine classified its error), not kill the process from the
// hedge's goroutine.
func TestReview46_HedgeErrorClassifyPanicKillsProcess(t *testing.T) {
	if os.Getenv("REVIEW46_CHILD") == "1" {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
		func() {
			defer func() { fmt.Println("caller recovered:", recover()) }()
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					var e *review46NilErr
					return 0, e // typed nil
				}
				select {
				case <-time.After(50 * time.Millisecond):
				case <-ctx.Done():
				}
				return 1, nil
			})
			fmt.Println("call returned:", err)
		}()
		time.Sleep(50 * time.Millisecond)
		fmt.Println("SURVIVED")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview46_HedgeErrorClassifyPanicKillsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REVIEW46_CHILD=1")
	out, err := cmd.CombinedOutput()
	s := string(out)
	if !strings.Contains(s, "SURVIVED") {
		i := strings.Index(s, "goroutine ")
		tail := s
		if i > 0 && len(s) > i+1500 {
			tail = s[:i+1500]
		}
		t.Errorf("the process died (%v):\n%s", err, tail)
	} else {
		t.Logf("child:\n%s", s)
	}
}
