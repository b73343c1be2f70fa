package pipeline

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHedgeTimersShardsFireEachRaceWhenDue: races dealt over the shards,
// some removed before they are due, each fire once, exactly when due, and
// the removed never.
func TestHedgeTimersShardsFireEachRaceWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timers := testTimers()
		rng := rand.New(rand.NewPCG(5, 6))
		type entry struct {
			race    *firedAt
			due     hedgeDue
			delay   time.Duration
			removed bool
		}
		entries := make([]*entry, 100)
		for i := range entries {
			e := &entry{race: &firedAt{start: time.Now()}, delay: time.Duration(100+rng.IntN(500)) * time.Millisecond}
			e.due.race, e.due.shard = e.race, timers.deal()
			entries[i] = e
			assert.True(t, timers.add(&e.due, e.delay))
			if rng.IntN(3) == 0 {
				assert.True(t, timers.remove(&e.due), "entry %d, at once", i)
				assert.False(t, timers.remove(&e.due), "entry %d, again", i)
				e.removed = true
			}
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		}
		time.Sleep(time.Second)
		shards := map[uint32]bool{}
		for i, e := range entries {
			shards[e.due.shard] = true
			if e.removed {
				assert.Empty(t, e.race.fired(), "entry %d was removed", i)
			} else {
				assert.Equal(t, []time.Duration{e.delay}, e.race.fired(), "entry %d", i)
				assert.False(t, timers.remove(&e.due), "entry %d, fired", i)
			}
		}
		assert.Len(t, shards, timerShards, "races dealt over every shard")
		for i := range timers.shards {
			assert.Empty(t, timers.shards[i].due, "shard %d", i)
		}
	})
}
