package breaker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a shared
// breaker's flusher and watcher end with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
