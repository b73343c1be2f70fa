package throttle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/stretchr/testify/require"
)

// oldProbability is probability as its doc states it: 0 where nothing
// failed in the window, else the formula.
func oldProbability(t *Throttle, e int64) float64 {
	if t.failed.Sum(e) == 0 {
		return 0
	}
	return t.formula(e)
}

var (
	r36fail   = errors.New("503")
	r36perm   = resilience.Permanent(errors.New("400"))
	r36reject = resilience.Rejected(errors.New("bad url"))
)

// Randomised model check, single goroutine, fake time: whatever the
// sequence of Admit, Done (nil, failure, permanent, canceled, rejected),
// sleeps (within a bucket, whole buckets, past the window) and outage
// phases, the new shortcut never says 0 where the old formula said more
// than 0, at the lagging epoch or at the real current bucket.
func TestReview36ShortcutAgreesWithOldFormula(t *testing.T) {
	type cfg struct {
		k float64
		w time.Duration
	}
	cfgs := []cfg{{2, 10 * time.Second}, {1.1, 10 * time.Second}, {1.5, 10 * time.Millisecond}, {1.1, 10 * time.Millisecond}, {1e9, time.Second}, {2, time.Hour}}
	for _, c := range cfgs {
		for seed := range uint64(40) {
			t.Run(fmt.Sprintf("k%v_w%v_s%d", c.k, c.w, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := rand.New(rand.NewPCG(seed, 36))
					th := New(K(c.k), Window(c.w))
					bucket := th.clock.Bucket()
					start := time.Now() // fake time: New read the same instant
					var out []Ticket
					failRate := 0.0
					maxOld, maxDiff := 0.0, 0.0
					gateHealthy, sustainedByRefusals := 0, 0
					defer func() {
						if seed == 0 {
							t.Logf("shortcut taken with >=10 accepts: %d; p>0 held up by refusals alone: %d; max old p %.3f", gateHealthy, sustainedByRefusals, maxOld)
						}
					}()
					check := func(step int, what string) {
						cur := int64(time.Since(start)) / int64(bucket)
						for _, e := range []int64{th.clock.Epoch(), cur} {
							o, n := oldProbability(th, e), th.probability(e)
							maxOld = max(maxOld, o)
							if th.failed.Sum(e) == 0 {
								if th.refused.Sum(e) == 0 {
									if th.accept.Sum(e) >= minAnswers {
										gateHealthy++
									}
								} else if o > 0 {
									sustainedByRefusals++
								}
							}
							if o > 0 && n == 0 {
								maxDiff = max(maxDiff, o)
								require.Failf(t, "shortcut diverges", "step %d (%s) e=%d cur=%d: old %.4f new 0; req=%d acc=%d failed=%d refused=%d out=%d",
									step, what, e, cur, o, th.requests.Sum(e), th.accept.Sum(e), th.failed.Sum(e), th.refused.Sum(e), th.out.Load())
							}
							if n != o {
								require.Failf(t, "differs", "step %d: old %v new %v", step, o, n)
							}
						}
					}
					for step := range 6000 {
						if step%500 == 0 {
							// phases: healthy, outage, partial, healthy...
							failRate = []float64{0, 1, 1, 0.7, 0.3, 0, 0.95, 0, 0.5, 1, 0, 0}[step/500]
						}
						var what string
						switch x := r.IntN(100); {
						case x < 45:
							what = "admit"
							tk, err := th.Admit()
							if err == nil {
								out = append(out, tk)
							}
						case x < 90 && len(out) > 0:
							i := r.IntN(len(out))
							tk := out[i]
							out[i] = out[len(out)-1]
							out = out[:len(out)-1]
							var err error
							switch y := r.Float64(); {
							case y < failRate:
								err = r36fail
								if r.IntN(5) == 0 {
									err = context.DeadlineExceeded
								}
							case y < failRate+0.05:
								err = context.Canceled
							case y < failRate+0.08:
								err = r36reject
							case y < failRate+0.1:
								err = r36perm
							}
							what = fmt.Sprintf("done %v", err)
							th.Done(tk, err)
						default:
							what = "sleep"
							switch r.IntN(6) {
							case 0:
								time.Sleep(bucket / 7)
							case 1:
								time.Sleep(bucket)
							case 2:
								time.Sleep(3 * bucket)
							case 3:
								time.Sleep(11 * bucket)
							default:
								time.Sleep(time.Duration(r.Int64N(int64(bucket))))
							}
						}
						check(step, what)
					}
					_ = maxOld
				})
			})
		}
	}
}

// Many goroutines at once under -race: Admit, Done with every class, and
// readers of RejectProbability, over a window of 10 ms (buckets of 1 ms,
// many rollovers). After they stop, the shortcut still agrees with the old
// formula on the rings they left.
func TestReview36ConcurrentRingRace(t *testing.T) {
	for _, k := range []float64{1.1, 2} {
		th := New(K(k), Window(10*time.Millisecond))
		var stop atomic.Bool
		var wg sync.WaitGroup
		var refused, admitted atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; !stop.Load(); i++ {
					tk, err := th.Admit()
					if err != nil {
						refused.Add(1)
						continue
					}
					admitted.Add(1)
					var derr error
					switch r.IntN(6) {
					case 0, 1:
						derr = r36fail
					case 2:
						derr = context.Canceled
					case 3:
						derr = r36reject
					}
					if i%50 == 0 {
						time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
					}
					th.Done(tk, derr)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				_ = th.RejectProbability()
			}
		}()
		time.Sleep(500 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		require.Zero(t, th.out.Load())
		require.Positive(t, refused.Load(), "an outage of 1 in 3 failed must make it refuse with k=%v", k)
		e := th.clock.Now(&th.requests)
		for d := int64(0); d < 12; d++ {
			o, n := oldProbability(th, e+d), th.probability(e+d)
			require.Equal(t, o, n, "k=%v e+%d", k, d)
		}
		t.Logf("k=%v admitted %d refused %d", k, admitted.Load(), refused.Load())
	}
}

// The window package's Ring.Add, given an epoch 10 buckets stale (a
// goroutine preempted between t.clock.Epoch() and accept.Add in Done),
// reset the slot that then counted a fresh bucket: that bucket's accepts
// were lost while its requests stayed, and the old formula refused (with
// K 1.1) a healthy dependency, where the new shortcut did not. Since
// review90, Add counts nothing of a bucket a window old: no accept is
// lost, and neither formula refuses.
func TestReview36StaleAcceptWipeOldRefusesNewDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New(K(1.1), Window(10*time.Second))
		bucket := th.clock.Bucket()
		stale := th.clock.Epoch() // a Done loads the epoch, then is preempted
		for i := range 11 {
			if i > 0 {
				time.Sleep(bucket)
				th.clock.Now(&th.requests)
			}
			for range 100 {
				tk, err := th.Admit()
				require.NoError(t, err)
				th.Done(tk, nil)
			}
		}
		// the preempted Done resumes: accept.Add with an epoch 10 buckets old
		th.accept.Add(stale)
		e := th.clock.Epoch()
		o, n := oldProbability(th, e), th.probability(e)
		t.Logf("req=%d acc=%d failed=%d refused=%d old=%.4f new=%.4f", th.requests.Sum(e), th.accept.Sum(e), th.failed.Sum(e), th.refused.Sum(e), o, n)
		require.Equal(t, uint64(1000), th.accept.Sum(e), "the fresh buckets' accepts are all there")
		require.Zero(t, n)
		require.Zero(t, o)
	})
}
