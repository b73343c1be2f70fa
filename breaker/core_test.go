package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The core keeps gobreaker's model: the same verdicts, states and counts
// for the same calls at the same times, over random runs of admissions,
// outcomes and pauses, with and without a window. A call is ended before
// its bucket leaves the window, where the core counts a late success that
// gobreaker drops (see core). Calls that end in the order they began agree
// throughout; in any order, they agree until gobreaker's run of successes
// or failures outgrows the total of its kind in the window (a success that
// left the window still in the run), which the core never lets happen.
func TestCoreAgreesWithGobreaker(t *testing.T) {
	compared, steps := 0, 0
	errFail, errExcl := errors.New("fail"), errors.New("excluded")
	windows := []struct {
		window  time.Duration
		buckets int
	}{{0, 1}, {time.Second, 1}, {time.Second, 4}, {600 * time.Millisecond, 6}}
	for _, w := range windows {
		for seed := range uint64(60) {
			inOrder := seed%2 == 0
			t.Run(fmt.Sprintf("%v-%d-%d", w.window, w.buckets, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rnd := rand.New(rand.NewPCG(seed, 7))
					probes := uint32(1 + rnd.IntN(3))
					trip := func(n Counts) bool {
						return n.ConsecutiveFailures >= 3 || (n.TotalFailures+n.TotalSuccesses >= 4 && n.TotalFailures*2 >= n.TotalFailures+n.TotalSuccesses)
					}
					var ours, theirs []string
					c := newCore(probes, 300*time.Millisecond, w.window, w.buckets, trip, func(from, to resilience.State) {
						ours = append(ours, from.String()+">"+to.String())
					})
					st := gobreaker.Settings{
						MaxRequests: probes, Timeout: 300 * time.Millisecond,
						ReadyToTrip:  func(n gobreaker.Counts) bool { return trip(Counts(n)) },
						IsSuccessful: func(err error) bool { return err == nil },
						IsExcluded:   func(err error) bool { return err == errExcl },
						OnStateChange: func(_ string, from, to gobreaker.State) {
							theirs = append(theirs, from.String()+">"+to.String())
						},
					}
					if w.window > 0 {
						st.Interval = w.window
						if w.buckets > 1 {
							st.BucketPeriod = w.window / time.Duration(w.buckets)
						}
					}
					gb := gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
					type inflight struct {
						a     admission
						done  func(error)
						at    time.Time
						probe bool // admitted half-open
					}
					var calls []inflight
					end := func(i int) {
						k := rnd.IntN(3)
						c.done(calls[i].a, []outcome{counted, failed, excluded}[k])
						calls[i].done([]error{nil, errFail, errExcl}[k])
						calls = append(calls[:i], calls[i+1:]...)
					}
					for step := range 400 {
						switch r := rnd.IntN(10); {
						case r < 4:
							v, a := c.admit()
							done, err := gb.Allow()
							want := map[error]verdict{nil: admitted, gobreaker.ErrOpenState: refusedOpen, gobreaker.ErrTooManyRequests: refusedBusy}[err]
							require.Equal(t, want, v, "step %d: verdict", step)
							if v == admitted {
								calls = append(calls, inflight{a, done, time.Now(), c.State() == resilience.StateHalfOpen})
							}
						case r < 7 && len(calls) > 0:
							if inOrder {
								end(0)
							} else {
								end(rnd.IntN(len(calls)))
							}
						default:
							d := time.Duration(rnd.IntN(150)+1) * time.Millisecond
							for i := 0; i < len(calls); {
								// A probe out for overdueProbe open timeouts lets
								// another go (core.admit), where gobreaker's waits
								// for it forever.
								if w.window > 0 && time.Since(calls[i].at)+d >= w.window-w.window/time.Duration(w.buckets) ||
									calls[i].probe && time.Since(calls[i].at)+d >= overdueProbe*300*time.Millisecond {
									end(i)
								} else {
									i++
								}
							}
							time.Sleep(d)
						}
						steps++
						gs, cs := gb.State(), c.State()
						g, n := Counts(gb.Counts()), c.Counts()
						require.LessOrEqual(t, n.ConsecutiveSuccesses, n.TotalSuccesses, "step %d", step)
						require.LessOrEqual(t, n.ConsecutiveFailures, n.TotalFailures, "step %d", step)
						if !inOrder && (g.ConsecutiveSuccesses > g.TotalSuccesses || g.ConsecutiveFailures > g.TotalFailures) {
							return
						}
						compared++
						require.Equal(t, gs.String(), cs.String(), "step %d: state", step)
						require.Equal(t, g, n, "step %d: counts", step)
						require.Equal(t, theirs, ours, "step %d: changes", step)
					}
					assert.NotEmpty(t, ours, "the run changed state")
				})
			})
		}
	}
	assert.Greater(t, compared, steps*3/4, "steps compared with gobreaker")
}

// A failure whose call outlasted the window counts as it ends, in the
// window as it is then (review118: a dependency whose failures take
// longer than the window never opened the breaker), and nothing counts
// until it ends.
func TestAFailureThatOutlastsTheWindowCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New("old", ConsecutiveFailures(1), Window(time.Second, 4))
		started := make(chan struct{})
		go func() {
			_ = b.Execute(t.Context(), func(context.Context) error {
				close(started)
				time.Sleep(1100 * time.Millisecond) // its bucket leaves the window meanwhile
				return errors.New("late")
			})
		}()
		<-started
		synctest.Wait()
		time.Sleep(1050 * time.Millisecond)
		assert.Equal(t, resilience.StateClosed, b.State())
		assert.Equal(t, Counts{}, b.Counts(), "its request left the window")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, resilience.StateOpen, b.State(), "the late failure trips it")
	})
}
