package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSignalStopsAmplification: 27 requests reach D per user request
// without the signal, 3 with it, and the user's call fails no later.
func TestSignalStopsAmplification(t *testing.T) {
	off := run(scenario{}, 5)
	on := run(scenario{signal: true}, 5)
	assert.Equal(t, 27.0, off.dPerRequest, "3 attempts at each of 3 layers")
	assert.LessOrEqual(t, on.dPerRequest, 3.0)
	assert.LessOrEqual(t, on.p50, off.p50, "the user's call fails no later with the signal")
	assert.Equal(t, http.StatusServiceUnavailable, on.status, "D's 503 stays 503 up the chain")
}

// TestSlowDependency: with D slower than every attempt timeout, the signal
// never makes amplification worse.
func TestSlowDependency(t *testing.T) {
	off := run(scenario{slowD: 200e6}, 3)
	on := run(scenario{signal: true, slowD: 200e6}, 3)
	t.Logf("D requests per user request: %.1f without the signal, %.1f with it", off.dPerRequest, on.dPerRequest)
	assert.LessOrEqual(t, on.dPerRequest, off.dPerRequest)
}

// TestRecoveryIsNoWorse: after D recovers, as many calls succeed with the
// signal as without; and with a retry quota, the signal still cuts D's
// load.
func TestRecoveryIsNoWorse(t *testing.T) {
	off := run(scenario{recoverAfter: 5}, 15)
	on := run(scenario{signal: true, recoverAfter: 5}, 15)
	assert.Equal(t, 10, off.after)
	assert.GreaterOrEqual(t, on.okAfterRecovery, off.okAfterRecovery)
	assert.Equal(t, 10, on.okAfterRecovery)

	quotaOff := run(scenario{quota: true}, 5)
	quotaOn := run(scenario{signal: true, quota: true}, 5)
	assert.Less(t, quotaOn.dPerRequest, quotaOff.dPerRequest)
}
