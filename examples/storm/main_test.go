package main

import (
	"testing"
	"testing/synctest"
	"time"

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

// TestOutageShape runs the outage with fewer clients in fake time, so
// that a loaded machine cannot make the clients fall behind their schedule.
func TestOutageShape(t *testing.T) {
	const clients = 200
	var results []outcome
	synctest.Test(t, func(t *testing.T) { results = runOutage(clients) })
	byName := map[string]outcome{}
	for _, o := range results {
		byName[o.name] = o
	}
	immediate, pipe := byName["immediate retry"], byName["pipeline (breaker, full jitter, retry quota)"]
	immCalls, _ := immediate.totals()
	pipeCalls, pipePeak := pipe.totals()
	assert.Less(t, pipeCalls*3, immCalls, "the pipeline sends a fraction of immediate retry's calls")
	assert.LessOrEqual(t, float64(pipePeak), 3*clients/10.0, "and its peak stays near the offered load")
	// Once the breaker has had half a second to open, the backend must see
	// far less than the clients offer: only the half-open probes.
	shielded := 0
	for _, b := range pipe.load[int((outageStart+500*time.Millisecond)/bucket):int(outageEnd/bucket)] {
		shielded += b.Requests
	}
	offered := clients * int(outageEnd-outageStart-500*time.Millisecond) / int(time.Second)
	t.Logf("immediate retry %d calls; pipeline %d calls, peak %d per bucket, %d in the shielded part of the outage (%d offered)",
		immCalls, pipeCalls, pipePeak, shielded, offered)
	assert.Less(t, shielded*4, offered, "the open breaker shields the backend")
	_, ok := pipe.recovery()
	assert.True(t, ok, "the backend recovers under the pipeline")
}
