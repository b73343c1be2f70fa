package throttle_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestWorkerLoopAfterABlip: workers that take the next job as soon as a
// call ends, refused or not (a queue consumer, a batch job), and a
// dependency that fails at once for 30 ms, then is healthy. The blip's
// fast failures outnumber the accepts in the window, and the throttle
// refuses while they are in it; once they leave, it refuses nothing. Were
// each refusal counted as a request, the workers' instant repeats would
// keep the share refused where the blip left it: 99% of a healthy
// dependency's calls refused 2 s after the blip (a review: 99.6%).
func TestWorkerLoopAfterABlip(t *testing.T) {
	for _, tc := range []struct {
		name string
		blip time.Duration // when, from the start
	}{{"cold", 0}, {"warm", 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				assertClearAfterBlip(t, tc.blip, workerLoops(tc.blip, 5*time.Microsecond))
			})
		})
	}
}

const (
	loopWindow = time.Second
	loopSlice  = 250 * time.Millisecond
	loopSlices = 16
)

// loopCounts are the attempts admitted and refused in each slice.
type loopCounts struct{ admitted, refused [loopSlices]atomic.Int64 }

// workerLoops runs six workers for loopSlices slices through a throttle
// with a window of loopWindow, against a dependency that answers a
// healthy call in 2 ms and fails from blip for 30 ms; a failure, and a
// refused worker's move to its next call, take fast (0: no pause).
func workerLoops(blip, fast time.Duration) *loopCounts {
	th := throttle.New(throttle.Window(loopWindow))
	fail := errors.New("503")
	start := time.Now()
	var c loopCounts
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				since := time.Since(start)
				i := int(since / loopSlice)
				if i >= loopSlices {
					return
				}
				tk, err := th.Admit()
				switch {
				case err != nil:
					c.refused[i].Add(1)
					if fast > 0 {
						time.Sleep(fast) // the next job
					}
				case since >= blip && since < blip+30*time.Millisecond:
					c.admitted[i].Add(1)
					if fast > 0 {
						time.Sleep(fast)
					}
					th.Done(tk, fail)
				default:
					c.admitted[i].Add(1)
					time.Sleep(2 * time.Millisecond)
					th.Done(tk, nil)
				}
			}
		})
	}
	wg.Wait()
	return &c
}

// assertClearAfterBlip asserts that under 0.1% of the attempts were
// refused from one window and two buckets after the blip on, when the
// blip's failures are out of the window.
func assertClearAfterBlip(t *testing.T, blip time.Duration, c *loopCounts) {
	t.Helper()
	clear := int((blip + 30*time.Millisecond + loopWindow + loopWindow/5 + loopSlice - 1) / loopSlice)
	var late, all int64
	for i := range loopSlices {
		a, r := c.admitted[i].Load(), c.refused[i].Load()
		t.Logf("%5v: %6d admitted, %8d refused", time.Duration(i)*loopSlice, a, r)
		if i >= clear {
			late += r
			all += a + r
		}
	}
	assert.Less(t, float64(late)/float64(all), 0.001, "refused from %v on, once the blip is out of the window", time.Duration(clear)*loopSlice)
}

// openLoop offers rate calls a second for d, one attempt each answered at
// once by ok (true: accepted), and returns the attempts sent, those
// accepted and the calls refused.
func openLoop(th *throttle.Throttle, rate int, d time.Duration, ok func() bool) (sent, accepted, refused int) {
	step := time.Second / time.Duration(rate)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(step) {
		tk, err := th.Admit()
		if err != nil {
			refused++
			continue
		}
		sent++
		if ok() {
			accepted++
			th.Done(tk, nil)
		} else {
			th.Done(tk, errors.New("503"))
		}
	}
	return sent, accepted, refused
}

// TestWhatTheDependencyGets holds the package doc's figures: 1,000 calls
// a second (one attempt each, default options) to a dependency that
// accepts 100 a second (an overload: a plain client sends it 1,000 and
// gets 100 through), one that fails 60% of its attempts at random (a
// plain client gets 400 through), one that accepts nothing; over 30 s
// after a minute of it.
func TestWhatTheDependencyGets(t *testing.T) {
	if raceEnabled {
		t.Skip("a virtual-time simulation of figures, minutes under the race detector, which finds nothing in one goroutine: .ci/run runs it without")
	}
	for _, tc := range []struct {
		name           string
		ok             func(r *rand.Rand) func() bool
		sent, accepted [2]int // a second: at least, at most
	}{
		{"overload", func(*rand.Rand) func() bool {
			tokens, last := 0.0, time.Now()
			return func() bool {
				tokens = min(10, tokens+time.Since(last).Seconds()*100)
				last = time.Now()
				if tokens >= 1 {
					tokens--
					return true
				}
				return false
			}
		}, [2]int{185, 215}, [2]int{95, 101}},
		{"60% failing at random", func(r *rand.Rand) func() bool {
			return func() bool { return r.Float64() < 0.4 }
		}, [2]int{0, 60}, [2]int{0, 25}},
		{"dead", func(*rand.Rand) func() bool {
			return func() bool { return false }
		}, [2]int{0, 3}, [2]int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				synctest.Test(t, func(t *testing.T) {
					th := throttle.New()
					ok := tc.ok(rand.New(rand.NewPCG(seed, 1)))
					openLoop(th, 1000, time.Minute, ok)
					s, a, _ := openLoop(th, 1000, 30*time.Second, ok)
					t.Logf("sent %d a second, %d accepted", s/30, a/30)
					assert.GreaterOrEqual(t, s/30, tc.sent[0])
					assert.LessOrEqual(t, s/30, tc.sent[1])
					assert.GreaterOrEqual(t, a/30, tc.accepted[0])
					assert.LessOrEqual(t, a/30, tc.accepted[1])
				})
			}
		})
	}
}

// TestStaleConnectionsAfterIdle holds the package doc's figure: after an
// idle spell, 20 calls at once whose first attempts all fail at once (a
// pool of stale connections reset), then their 20 retries at once, to a
// dependency that accepts them. No accept is in the window: the 20
// failures are taken for an overload, and most retries are refused.
func TestStaleConnectionsAfterIdle(t *testing.T) {
	const trials, calls = 200, 20
	refused := 0
	for range trials {
		th := throttle.New()
		var tks []throttle.Ticket
		for range calls {
			tk, err := th.Admit()
			if assert.NoError(t, err, "the first attempts") {
				tks = append(tks, tk)
			}
		}
		for _, tk := range tks {
			th.Done(tk, errors.New("connection reset"))
		}
		tks = tks[:0]
		for range calls {
			if tk, err := th.Admit(); err != nil {
				refused++
			} else {
				tks = append(tks, tk)
			}
		}
		for _, tk := range tks {
			th.Done(tk, nil)
		}
	}
	mean := float64(refused) / trials
	t.Logf("%.1f of %d retries refused on average", mean, calls)
	assert.InDelta(t, 17, mean, 1.5)
}

// TestWorkerLoopAfterABlipRealTime is TestWorkerLoopAfterABlip on the
// real clock, the workers taking the next job with no pause at all: as
// fast as the throttle refuses. A goroutine measures how late 1 ms
// sleeps wake; a run that fell behind by more than 100 ms says so and
// reports nothing.
func TestWorkerLoopAfterABlipRealTime(t *testing.T) {
	if raceEnabled {
		t.Skip("a real-time bound on a 2-core machine: the race detector takes the CPU it measures; .ci/run runs it without")
	}
	var lag time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(loopSlices * loopSlice); time.Now().Before(end); {
			before := time.Now()
			time.Sleep(time.Millisecond)
			lag = max(lag, time.Since(before)-time.Millisecond)
		}
	}()
	const blip = 300 * time.Millisecond
	c := workerLoops(blip, 0)
	<-done
	if lag > 100*time.Millisecond {
		t.Skipf("the run fell behind: a 1 ms sleep woke %v late", lag)
	}
	assertClearAfterBlip(t, blip, c)
}

// TestRefusalsAloneRefuseNothing: with no failure left in the window, the
// throttle refuses nothing, whatever its own refusals in the window: they
// say nothing of the dependency.
func TestRefusalsAloneRefuseNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(time.Second))
		var tks []throttle.Ticket
		for range 120 {
			tk, err := th.Admit()
			require.NoError(t, err)
			tks = append(tks, tk)
		}
		for _, tk := range tks[:100] {
			th.Done(tk, errors.New("503"))
		}
		time.Sleep(500 * time.Millisecond)
		refused := 0
		for range 10000 {
			if tk, err := th.Admit(); err != nil {
				refused++
			} else {
				tks = append(tks, tk) // answered later
			}
		}
		require.Greater(t, refused, 9000)
		time.Sleep(450 * time.Millisecond)
		for _, tk := range tks[100:] {
			th.Done(tk, nil)
		}
		time.Sleep(200 * time.Millisecond) // the failures have left the window, the refusals not
		assert.Zero(t, th.RejectProbability())
	})
}
