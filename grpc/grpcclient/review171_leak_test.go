package grpcclient

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// After the failing scenarios (retry with a held replay, a hung handler,
// a slot wait), no goroutine of the interceptor's is left. Their own
// assertions are not this test's: run with R171_LEAK=1 to check leaks
// alone (the subtests' failures are expected findings).
func TestReview171NoLeakAfterDependencyFailures(t *testing.T) {
	if os.Getenv("R171_LEAK") == "" {
		t.Skip("R171_LEAK=1 to run")
	}
	opt := goleak.IgnoreCurrent()
	t.Run("replay", func(t *testing.T) { TestReview171ReplayHeldByHungServerIsCounted(t) })
	t.Run("hung", TestReview171PacedUploadToHungHandlerIsCounted)
	t.Run("slot", TestReview171StreamSlotWaitThenHangIsCounted)
	t.Run("proxy", TestReview171DeadServerBehindProxyIsCounted)
	if err := goleak.Find(opt); err != nil {
		t.Fatalf("LEAK: %v", err)
	}
	t.Log("no leak")
}
