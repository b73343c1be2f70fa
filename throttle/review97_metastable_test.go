package throttle_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// r97gate is a throttle under test, or none (a plain client).
type r97gate interface {
	admit() (uint64, bool)
	done(uint64, error)
	p() float64
}

type r97new struct{ t *throttle.Throttle }

func (g r97new) admit() (uint64, bool)     { tk, err := g.t.Admit(); return uint64(tk), err == nil }
func (g r97new) done(tk uint64, err error) { g.t.Done(throttle.Ticket(tk), err) }
func (g r97new) p() float64                { return g.t.RejectProbability() }

type r97plain struct{}

func (r97plain) admit() (uint64, bool) { return 1, true }
func (r97plain) done(uint64, error)    {}
func (r97plain) p() float64            { return 0 }

var r97trace = false

var r97overload = errors.New("503 overloaded")

// r97meta is a metastable dependency: healthy it accepts up to goodCap
// attempts a second; a trigger (or a load above goodCap) puts it in a bad
// state (a cold cache, a retry storm inside it) where it accepts at most
// badCap a second and fails the rest; it gets well again only once the
// attempts sent to it stay under recover a second for a whole second.
type r97meta struct {
	goodCap, badCap, recover int
	bad                      bool
	sent                     [1000]int // sends per ms, last second
	acceptedThisBucket       int       // accepts in the current 100 ms
	badSince, wellAt         time.Duration
}

func (d *r97meta) load() int {
	n := 0
	for _, v := range d.sent {
		n += v
	}
	return n
}

// r97run drives one gate at offered calls a second (open loop: one
// attempt a call, answered 10 ms later), the dependency made bad at 5 s
// until 35 s, for total; it returns when the dependency got well again (-1 if
// never) and what it got a second in its last 5 s.
func r97run(t *testing.T, g r97gate, offered int, d *r97meta, total time.Duration) (wellAfter time.Duration, sentPerS, accPerS float64) {
	type pending struct {
		tk  uint64
		err error
		due int
	}
	var q []pending
	var sentTail, accTail int
	wellAfter = -1
	perMs := float64(offered) / 1000
	var carry float64
	ms := int(total / time.Millisecond)
	for i := 0; i < ms; i++ {
		slot := i % 1000
		d.sent[slot] = 0
		if i%100 == 0 {
			d.acceptedThisBucket = 0
		}
		if i == 5000 {
			d.bad = true
		}
		// answers due now
		for len(q) > 0 && q[0].due <= i {
			g.done(q[0].tk, q[0].err)
			q = q[1:]
		}
		carry += perMs
		for carry >= 1 {
			carry--
			tk, ok := g.admit()
			if !ok {
				continue
			}
			d.sent[slot]++
			var err error
			lim := d.goodCap / 10
			if d.bad {
				lim = d.badCap / 10
			}
			if d.acceptedThisBucket < lim {
				d.acceptedThisBucket++
			} else {
				err = r97overload
			}
			if i >= ms-5000 {
				sentTail++
				if err == nil {
					accTail++
				}
			}
			q = append(q, pending{tk, err, i + 10})
		}
		// state changes, once a ms
		if d.bad && i >= 35000 && i%100 == 0 && d.load() < d.recover {
			d.bad = false
			if wellAfter < 0 {
				wellAfter = time.Duration(i-35000) * time.Millisecond
			}
		}
		if !d.bad && i > 35000 && d.load() > d.goodCap {
			d.bad = true // overloaded again
		}
		if r97trace && i%1000 == 999 {
			t.Logf("t=%ds bad=%v load=%d p=%.3f", i/1000+1, d.bad, d.load(), g.p())
		}
		time.Sleep(time.Millisecond)
	}
	return wellAfter, float64(sentTail) / 5, float64(accTail) / 5
}

// Under a real overload of a metastable dependency (it accepts 100 of
// 1,000 calls a second in its bad state, and needs its load under 250 a
// second to get well), the throttle must shed enough for it to recover,
// as the book's count does; a plain client keeps it down for good.
// Counting refusals at 1-p throughout, it sent 320 to 380 a second and
// kept it down too (review97).
func TestReview97MetastableDependencyRecovers(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() r97gate
	}{
		{"plain", func() r97gate { return r97plain{} }},
		{"new", func() r97gate { return r97new{throttle.New()} }},
	} {
		for _, bad := range []int{50, 100} {
			t.Run(fmt.Sprintf("%s/bad%d", tc.name, bad), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					d := &r97meta{goodCap: 1500, badCap: bad, recover: bad * 5 / 2}
					well, sent, acc := r97run(t, tc.mk(), 1000, d, 90*time.Second)
					t.Logf("%s, bad state accepts %d/s, well under %d/s: dependency well again %v after the trigger ended; last 5 s: sent %.0f/s accepted %.0f/s", tc.name, bad, d.recover, well, sent, acc)
					if tc.name != "plain" && well < 0 {
						t.Errorf("%s: the throttle never let the metastable dependency recover (sent %.0f/s, accepted %.0f/s for 55 s)", tc.name, sent, acc)
					}
				})
			})
		}
	}
}
