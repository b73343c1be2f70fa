package throttle

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
)

var errFail163 = errors.New("503: overloaded")

// pump163 drives t to refuse at p near 1 in the current bucket: a few
// failures, then many refusals (counted as requests while failing).
func pump163(t *testing.T, th *Throttle, refusals int) {
	t.Helper()
	for range 40 {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, errFail163)
		}
	}
	for range refusals {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, errFail163)
		}
	}
	if p := th.RejectProbability(); p < 0.99 {
		t.Fatalf("setup: p = %v, want near 1", p)
	}
}

// admitProbe admits one attempt and reports whether it went through as
// the bucket's probe (the draw refused it).
func admitProbe163(th *Throttle) (Ticket, bool, bool) {
	before := th.probed.Load()
	tk, err := th.Admit()
	if err != nil {
		return 0, false, false
	}
	return tk, true, th.probed.Load() != before
}

// The bucket's probe is sent and then canceled by its caller's deadline
// (a hanging dependency): it reached the dependency, so the bucket owes
// no other probe. Then an attempt that the draw let through (the trickle)
// is admitted in the same bucket and not sent (a later gate refused it):
// Done(Unsent) must not hand the bucket a second probe.
func TestReview163CanceledProbeThenUnsentTrickleNoSecondProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New()
		pump163(t, th, 20_000)
		time.Sleep(time.Second) // a fresh bucket: nothing sent in it
		e := th.clock.Now(&th.requests)

		// A: the bucket's probe, sent, then its caller's deadline ends it.
		var a Ticket
		for range 100 {
			tk, ok, probe := admitProbe163(th)
			if ok && probe {
				a = tk
				break
			}
			if ok { // a draw admission first: not this scenario, hand it back unsent
				th.Done(tk, classify.Unsent(context.Canceled))
			}
		}
		if a == 0 {
			t.Fatal("setup: no probe in a fresh bucket")
		}
		if int64(a-1) != e {
			t.Skipf("probe ticket in bucket %d, not %d", a-1, e)
		}
		th.Done(a, context.Canceled) // sent, then canceled: reached the dependency

		// B: an attempt the draw admits in the same bucket (trickle), not sent.
		var b Ticket
		for range 2_000_000 {
			tk, ok, probe := admitProbe163(th)
			if ok {
				if probe {
					t.Fatalf("a second probe in bucket %d after the first was sent and canceled", e)
				}
				b = tk
				break
			}
		}
		if b == 0 {
			t.Skip("setup: the draw admitted nothing")
		}
		if int64(b-1) != e {
			t.Skipf("trickle ticket in bucket %d, not %d", b-1, e)
		}
		th.Done(b, classify.Unsent(context.Canceled))
		if got := th.probed.Load(); got != e+1 {
			t.Errorf("after the probe of bucket %d was SENT (then canceled), an unsent trickle attempt made the bucket owe a probe again: probed = %d, want %d", e, got, e+1)
		}
		// And the next attempt is then let through as a second probe.
		probes := 0
		for range 50 {
			tk, ok, probe := admitProbe163(th)
			if ok && probe {
				probes++
				th.Done(tk, context.Canceled) // sent, canceled again
			} else if ok {
				th.Done(tk, errFail163)
			}
		}
		if probes > 0 {
			t.Errorf("bucket %d: %d more probe(s) reached the dependency after its probe was sent", e, probes)
		}
	})
}

// Control (the fix itself): a probe sent and canceled, with nothing else
// in the bucket, leaves no probe owed; a probe not sent leaves one owed.
func TestReview163ProbeSentVersusUnsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := New()
		pump163(t, th, 20_000)
		for round := range 4 {
			time.Sleep(time.Second)
			e := th.clock.Now(&th.requests)
			var a Ticket
			for range 100 {
				tk, ok, probe := admitProbe163(th)
				if ok && probe {
					a = tk
					break
				}
				if ok {
					th.Done(tk, classify.Unsent(context.Canceled))
				}
			}
			if a == 0 {
				t.Fatalf("round %d: no probe", round)
			}
			if round%2 == 0 {
				th.Done(a, classify.Unsent(context.Canceled)) // refused by the limit: owed
				if th.probed.Load() != e {
					t.Fatalf("round %d: unsent probe: probed %d, want %d (owed)", round, th.probed.Load(), e)
				}
				// the next goes through as the probe
				got := false
				for range 100 {
					tk, ok, probe := admitProbe163(th)
					if ok && probe {
						got = true
						th.Done(tk, context.DeadlineExceeded)
						break
					} else if ok {
						th.Done(tk, classify.Unsent(context.Canceled))
					}
				}
				if !got {
					t.Fatalf("round %d: the owed probe never came", round)
				}
			} else {
				th.Done(a, context.Canceled)
				if th.probed.Load() != e+1 {
					t.Fatalf("round %d: sent+canceled probe: probed %d, want %d", round, th.probed.Load(), e+1)
				}
			}
		}
	})
}
