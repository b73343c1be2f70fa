package httpclient_test

import (
	"errors"
	"net/http"
	"testing"

	"go.uber.org/goleak"
)

func errorsAsImpl(err error, target any) bool { return errors.As(err, target) }

// review51Leak checks for leaks after every cleanup of t (servers closed).
func review51Leak(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, ign)
	})
}
