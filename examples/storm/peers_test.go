package main

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPeersWithoutTheAttemptTimeoutRideOutTheDip: docs/storm.md says that
// in the metastable failure the attempt timeout, not the retry library,
// is the trigger: with none (one longer than the caller's deadline), the
// plain retry and failsafe-go's complete every call, with one request
// each, as the Pipeline's defaults do.
func TestPeersWithoutTheAttemptTimeoutRideOutTheDip(t *testing.T) {
	sc := *scenarioByKey("metastable")
	sc.attemptTimeout = time.Hour
	var run []strategy
	for _, name := range []string{plainName, failsafeName, defaultsName} {
		s, ok := strategyByName(name)
		assert.True(t, ok, name)
		run = append(run, s)
	}
	var r []result
	synctest.Test(t, func(*testing.T) { r = runScenario(&sc, run, 1) })
	for _, res := range r {
		assert.Equal(t, 4000, res.ok(), res.strategy)
		assert.InDelta(t, 1.0, res.perCall(), 0.005, res.strategy)
	}
}
