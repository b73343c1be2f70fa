package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// Counts documents "(in the closed state, within its rolling window)";
// after an idle gap longer than the window it still reports the old
// outcomes until a call (or State) moves the window.
func TestReview90CountsAfterIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("c", breaker.Window(10*time.Second, 10))
		for i := 0; i < 3; i++ {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
		}
		time.Sleep(time.Minute)
		if c := b.Counts(); c.TotalFailures != 0 || c.ConsecutiveFailures != 0 {
			t.Errorf("a minute after, with a 10 s window: Counts %+v (Snapshot: %+v)", c, b.Snapshot().Counts)
		}
	})
}
