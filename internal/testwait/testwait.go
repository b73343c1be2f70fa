// Package testwait helps tests wait for what a goroutine gives, within a
// bound: in a testing/synctest bubble the bound is virtual, so a test that
// would otherwise hang fails at once, saying so.
package testwait

import (
	"testing"
	"time"
)

// Within returns what done gives within a minute, or fails the test.
func Within(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("still waiting a minute later")
		return nil
	}
}
