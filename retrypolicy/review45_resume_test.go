package retrypolicy

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The guard: asked twice per retry (before it is scheduled and before it
// runs), never before the first attempt.
func TestReview45GuardCalls(t *testing.T) {
	g, n := 0, 0
	var order []string
	_, err := DoGuarded(context.Background(), New(MaxAttempts(3), BaseDelay(0)), func() error { g++; order = append(order, "g"); return nil },
		func(context.Context) (int, error) { n++; order = append(order, "op"); return 0, errors.New("blip") })
	if !errors.Is(err, ErrMaxAttempts) || g != 4 || n != 3 || fmt.Sprint(order) != "[op g g op g g op]" {
		t.Fatalf("guard %d op %d order %v err %v", g, n, order, err)
	}
	// A rejected first attempt: the guard is asked after it (is it the guard's refusal?).
	g = 0
	_, err = DoGuarded(context.Background(), New(), func() error { g++; return nil },
		func(context.Context) (int, error) { return 0, resilience.Rejected(errors.New("full")) })
	if !errors.Is(err, ErrNotRetryable) || g != 1 {
		t.Fatalf("rejected: guard %d, err %v", g, err)
	}
}

// Resume and the quota: a stop before the retry was scheduled, or after
// its sleep (which gives its charge back), is charged by Resume;
// MaxAttempts holds across; the attempts numbering goes on.
func TestReview45ResumeQuotaAndAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := errors.New("open")
		for _, after := range []bool{false, true} {
			q := NewQuota(0, 10, 10*time.Second) // 100 a window, 10 a bucket
			p := New(MaxAttempts(4), BaseDelay(time.Millisecond), WithQuota(q))
			gcalls := 0
			open := false
			guard := func() error {
				gcalls++
				if open || (!after && gcalls == 1) || (after && gcalls == 2) {
					return stop
				}
				return nil
			}
			n := 0
			op := func(context.Context) (int, error) { n++; return 0, errors.New("blip") }
			_, err := DoGuarded(t.Context(), p, guard, op)
			var e *Error
			if !errors.As(err, &e) || e.Reason != stop || e.Attempts != 1 {
				t.Fatalf("after %v: %v", after, err)
			}
			before := q.Available()
			_, err = Resume(t.Context(), p, guard, err, op)
			if !errors.Is(err, ErrMaxAttempts) || n != 4 || !errors.As(err, &e) || e.Attempts != 4 {
				t.Fatalf("after %v: resume %v, ran %d", after, err, n)
			}
			// Resume's retries: 3 (attempts 2..4), each charged once.
			used := before - q.Available()
			want := 3
			if used != want {
				t.Errorf("after %v: Resume charged %d, want %d", after, used, want)
			}
		}
	})
}

// Resume with an error that is not a guard's stop is DoGuarded (a new
// call); with a canceled ctx it gives up at once with the stop's attempts.
func TestReview45ResumeEdges(t *testing.T) {
	stop := errors.New("open")
	p := New(MaxAttempts(3), BaseDelay(0))
	n := 0
	op := func(context.Context) (int, error) { n++; return 0, errors.New("blip") }
	_, err := DoGuarded(context.Background(), p, func() error { return stop }, op)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err2 := Resume(ctx, p, nil, err, op)
	var e *Error
	if !errors.As(err2, &e) || e.Attempts != 1 || !errors.Is(err2, context.Canceled) || n != 1 {
		t.Fatalf("canceled resume: %v ran %d", err2, n)
	}
	// Resume of the stop with a policy of fewer attempts.
	_, err3 := Resume(context.Background(), New(MaxAttempts(1)), nil, err, op)
	if !errors.Is(err3, ErrMaxAttempts) || n != 1 {
		t.Fatalf("fewer attempts: %v ran %d", err3, n)
	}
	// Resume of the stop wrapped: not recognised, a fresh loop of 3 (documented: not a guard's stop).
	n = 0
	_, err4 := Resume(context.Background(), p, nil, fmt.Errorf("w: %w", err), op)
	if n != 3 || !errors.Is(err4, ErrMaxAttempts) {
		t.Fatalf("wrapped: %v ran %d", err4, n)
	}
	t.Logf("note: Resume of a wrapped stop starts over: %d attempts after 1 made, MaxAttempts 3", n)
	// Resume of a nil error and of a non-guard *Error: DoGuarded.
	n = 0
	_, _ = Resume(context.Background(), p, nil, nil, op)
	if n != 3 {
		t.Fatalf("nil: ran %d", n)
	}
}
