package tally

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

type review166Answered struct{ answer error }

func (e review166Answered) Error() string { return "canceled, with an answer" }
func (e review166Answered) Unwrap() error { return context.Canceled }
func (e review166Answered) Answer() error { return e.answer }

type review166Panicky struct{}

func (review166Panicky) Error() string                     { return "panicky" }
func (review166Panicky) ResilienceClass() resilience.Class { panic("boom") }

type review166PanickyAnswer struct{}

func (review166PanickyAnswer) Error() string { return "panicky answer" }
func (review166PanickyAnswer) Unwrap() error { return context.Canceled }
func (review166PanickyAnswer) Answer() error { panic("boom") }

// TestReview166Classes: each outcome goes to the counter the doc names, and
// to one only.
func TestReview166Classes(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want Outcomes
	}{
		{"nil", nil, Outcomes{OK: 1}},
		{"transient", errors.New("x"), Outcomes{Failed: 1}},
		{"deadline (a timeout, transient)", context.DeadlineExceeded, Outcomes{Failed: 1}},
		{"permanent", resilience.Permanent(errors.New("x")), Outcomes{Failed: 1}},
		{"terminal", resilience.Terminal(errors.New("x")), Outcomes{Failed: 1}},
		{"rejected", resilience.Rejected(errors.New("x")), Outcomes{Refused: 1}},
		{"canceled", context.Canceled, Outcomes{Canceled: 1}},
		{"wrapped canceled", fmt.Errorf("a: %w", context.Canceled), Outcomes{Canceled: 1}},
		{"canceled with an answer", review166Answered{errors.New("503")}, Outcomes{Failed: 1}},
		{"canceled with a nil answer", review166Answered{nil}, Outcomes{Canceled: 1}},
		{"panicky class", review166Panicky{}, Outcomes{Failed: 1}},
		{"panicky answer", review166PanickyAnswer{}, Outcomes{Canceled: 1}},
	}
	for _, c := range cases {
		for _, n := range []int{1, 2} {
			var k Counts
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: Attempt panicked: %v", c.name, r)
					}
				}()
				k.Attempt(n, c.err)
			}()
			_, first, later := k.Load()
			got := first
			other := later
			if n != 1 {
				got, other = later, first
			}
			if got != c.want || other != (Outcomes{}) {
				t.Errorf("%s, attempt %d: first %+v later %+v, want %+v in the %s", c.name, n, first, later, c.want, map[bool]string{true: "first", false: "later"}[n == 1])
			}
		}
	}
}

// TestReview166ExactUnderGoroutines: 16 goroutines x 20000 attempts.
func TestReview166ExactUnderGoroutines(t *testing.T) {
	var k Counts
	var wg sync.WaitGroup
	errs := []error{nil, errors.New("x"), context.Canceled, resilience.Rejected(errors.New("r"))}
	const G, N = 16, 20000
	for g := range G {
		wg.Go(func() {
			for i := range N {
				k.Call()
				k.Attempt(1+(i+g)%2, errs[(i/2+g)%4])
			}
		})
	}
	wg.Wait()
	calls, first, later := k.Load()
	if calls != G*N {
		t.Errorf("calls = %d, want %d", calls, G*N)
	}
	sum := first.OK + first.Failed + first.Refused + first.Canceled + later.OK + later.Failed + later.Refused + later.Canceled
	if sum != G*N {
		t.Errorf("attempts = %d, want %d", sum, G*N)
	}
	for _, v := range []uint64{first.OK, first.Failed, first.Refused, first.Canceled, later.OK, later.Failed, later.Refused, later.Canceled} {
		if v != G*N/8 {
			t.Errorf("first %+v later %+v: want %d each", first, later, G*N/8)
			break
		}
	}
}

// TestReview166SamplingGaps: alone, the first call is timed, then one after
// a gap of 1 to 2*SampleEvery-1 calls, SampleEvery on average.
func TestReview166SamplingGaps(t *testing.T) {
	var k Counts
	const N = 400000
	last, timed := 0, 0
	minGap, maxGap := 1<<30, 0
	for i := 1; i <= N; i++ {
		if k.Call() {
			if i == 1 {
				last, timed = 1, 1
				continue
			}
			if timed == 0 {
				t.Fatalf("call %d timed before the first", i)
			}
			gap := i - last
			minGap, maxGap = min(minGap, gap), max(maxGap, gap)
			last = i
			timed++
		} else if i == 1 {
			t.Fatal("the first call is not timed")
		}
	}
	mean := float64(last-1) / float64(timed-1)
	if minGap < 1 || maxGap > 2*SampleEvery-1 {
		t.Errorf("gaps from %d to %d, want within 1..%d", minGap, maxGap, 2*SampleEvery-1)
	}
	if mean < SampleEvery-2 || mean > SampleEvery+2 {
		t.Errorf("mean gap %.2f, want about %d", mean, SampleEvery)
	}
}

// TestReview166SamplingUnderGoroutines: 8 goroutines calling at once time
// about one call in SampleEvery, not fewer (CAS losers must not starve the
// sampling) and not more.
func TestReview166SamplingUnderGoroutines(t *testing.T) {
	var k Counts
	var wg sync.WaitGroup
	var mu sync.Mutex
	timed := 0
	const G, N = 8, 50000
	for range G {
		wg.Go(func() {
			n := 0
			for range N {
				if k.Call() {
					n++
				}
			}
			mu.Lock()
			timed += n
			mu.Unlock()
		})
	}
	wg.Wait()
	want := float64(G*N) / SampleEvery
	if float64(timed) < 0.9*want || float64(timed) > 1.1*want {
		t.Errorf("%d calls timed of %d, want about %.0f", timed, G*N, want)
	}
}
