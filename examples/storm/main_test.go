package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContentionMatchesBrookersShape(t *testing.T) {
	results := runContention(100, 5)
	require.Equal(t, "exponential, no jitter", results[0].name)
	none, full := results[0], results[1]
	require.Equal(t, "full jitter", full.name)
	assert.Equal(t, 5050.0, none.calls, "without jitter, every round has one winner: 100+99+...+1")
	assert.Less(t, full.calls, none.calls/2, "full jitter does less than half the calls")
	assert.Less(t, full.time, none.time/10, "and finishes far sooner")
}

// TestOutageShape runs the real-time outage with fewer clients: about 6 s.
func TestOutageShape(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	const clients = 200
	results := runOutage(clients)
	byName := map[string]outcome{}
	for _, o := range results {
		byName[o.name] = o
	}
	immediate, pipe := byName["immediate retry"], byName["pipeline (breaker, full jitter, retry quota)"]
	immCalls, _ := immediate.totals()
	pipeCalls, pipePeak := pipe.totals()
	assert.Less(t, pipeCalls*3, immCalls, "the pipeline sends a fraction of immediate retry's calls")
	assert.LessOrEqual(t, float64(pipePeak), 3*clients/10.0, "and its peak stays near the offered load")
	_, ok := pipe.recovery()
	assert.True(t, ok, "the backend recovers under the pipeline")
}
