package breakerstore

import "time"

// SetWatchPing makes Watch ping every d (and wait d for the answer) until
// the returned func restores the default.
func SetWatchPing(d time.Duration) (restore func()) {
	pingPeriod.Store(int64(d))
	return func() { pingPeriod.Store(0) }
}
