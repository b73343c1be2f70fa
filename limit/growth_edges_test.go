package limit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Catches `l.limit < l.careful` as `<=`: a limit of 2 halved to 1 (careful
// 2) grows back to exactly 2 in one step of 1/1; from there, it grows by one
// an attempt again, to 3.
func TestLimitGrowsByOneOnceBackAtCareful(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(2), limit.Min(1), limit.Backoff(0.5))
	step := func(err error) {
		tk, aerr := l.Acquire(context.Background())
		if aerr != nil {
			t.Fatal(aerr)
		}
		l.Release(tk, err)
	}
	step(errors.New("overload")) // 2 -> 1, careful 2
	if got := l.Limit(); got != 1 {
		t.Fatalf("after a failure: limit %d, want 1", got)
	}
	step(nil) // 1 -> 2 (step 1/1), exactly careful
	if got := l.Limit(); got != 2 {
		t.Fatalf("limit %d, want 2", got)
	}
	step(nil) // at careful: +1 -> 3
	if got := l.Limit(); got != 3 {
		t.Fatalf("limit %d, want 3 (a limit back at careful grows by one an attempt)", got)
	}
}

// Catches dropping ClassRejected from the "teaches nothing" case in learn:
// an attempt not sent after all must not grow the limit.
func TestRejectedAttemptTeachesNothing(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(2), limit.Max(10))
	tk, _ := l.Acquire(context.Background())
	l.Release(tk, resilience.Rejected(errors.New("not sent")))
	if got := l.Limit(); got != 2 {
		t.Fatalf("limit %d after a rejected attempt, want 2", got)
	}
}

// Catches `inFlight*2 >= limit` as `>`: at exactly half the limit in use,
// a success grows the limit.
func TestSuccessAtExactlyHalfUseGrows(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(2), limit.Max(10))
	tk, _ := l.Acquire(context.Background()) // 1 in flight of 2: 1*2 >= 2
	l.Release(tk, nil)
	if got := l.Limit(); got != 3 {
		t.Fatalf("limit %d, want 3", got)
	}
}
