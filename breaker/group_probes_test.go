package breaker_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// The probes of a Group's breakers, one per host, all calling one shared
// dependency that is down from the start until 500 ms and then healthy.
// The breakers have the defaults: open after 5 failures in a row, a probe
// after 100 ms, which has no jitter. Calls come every 7 ms.
//
// When every call goes to every host at once (a fan-out), the breakers see
// the same failures at the same instants, open in the same instant, and
// probe in the same instant, every 100 ms and a call: 8 requests at once
// reach the dependency, in lockstep, until it is back. That is what one
// call of the fan-out sends it when all is well: lockstep adds no burst
// that healthy traffic does not make, and keeps each breaker's probes at
// one per open timeout, as jitter would.
//
// When each host's calls come at times of their own (here 0.5 ms apart),
// the breakers open at different instants and each probes on its own
// next call: no two probes arrive together.
func TestGroupProbesInLockstepOnlyWhenTheFailuresAre(t *testing.T) {
	const (
		hosts = 8
		every = 7 * time.Millisecond
		up    = 500 * time.Millisecond
		until = time.Second
	)
	for _, fanOut := range []bool{true, false} {
		t.Run("fan-out "+strconv.FormatBool(fanOut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var mu sync.Mutex
				arrived := map[time.Duration]int{} // requests at the dependency, by instant
				errDown := errors.New("503")
				dependency := func(context.Context) error {
					at := time.Since(start)
					mu.Lock()
					arrived[at]++
					mu.Unlock()
					if at < up {
						return errDown
					}
					return nil
				}
				g := breaker.NewGroup(hosts, func(host int) *breaker.Breaker { return breaker.New(strconv.Itoa(host)) })
				var wg sync.WaitGroup
				for host := range hosts {
					b, _ := g.Get(host)
					wg.Go(func() {
						if !fanOut {
							time.Sleep(time.Duration(host) * time.Millisecond / 2)
						}
						for range time.Duration(until) / every {
							_ = b.Execute(context.Background(), dependency)
							time.Sleep(every)
						}
					})
				}
				wg.Wait()

				var probes []int // of each instant a request arrived at while the breakers were open
				opened := 5 * every
				for _, at := range slices.Sorted(maps.Keys(arrived)) {
					if at > opened && at < up+every {
						probes = append(probes, arrived[at])
					}
				}
				healthy := arrived[slices.Max(slices.Collect(maps.Keys(arrived)))]
				t.Logf("requests at each instant of a probe: %v; at each of the last call: %d", probes, healthy)
				// Each breaker probes every 105 ms (100 ms, then its next
				// call): 4 times before 500 ms.
				instants, together := 4, hosts // at once
				if !fanOut {
					instants, together = 4*hosts, 1 // each at an instant of its own
				}
				assert.Len(t, probes, instants)
				for _, n := range probes {
					assert.Equal(t, together, n, "probes at one instant")
				}
				assert.LessOrEqual(t, slices.Max(probes), healthy, "no more at once than a healthy call of the fan-out sends")
				for host := range hosts {
					b, _ := g.Get(host)
					assert.Equal(t, "closed", b.State().String(), "host %d", host)
				}
			})
		})
	}
}
