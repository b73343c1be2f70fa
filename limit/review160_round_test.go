package limit_test

import (
	"context"
	"testing"

	"github.com/resiliencekit/resiliencekit/limit"
)

// A burst of failures of attempts sent in one round costs one step; a
// failure of an attempt sent after the decrease costs another.
func TestReview160OneStepPerRound(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(20), limit.Max(20))
	var tks []limit.Ticket
	for range 20 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	for _, tk := range tks {
		l.Release(tk, errR160)
	}
	if got := l.Limit(); got != 18 {
		t.Errorf("limit %d after one round of 20 failures, want 18", got)
	}
	tk, _ := l.Acquire(context.Background())
	l.Release(tk, errR160)
	if got := l.Limit(); got != 17 { // 18*0.9 = 16.2 -> Limit says 17
		t.Errorf("limit %d after a failure of the next round, want 17 (16.2)", got)
	}
	// 16.2 lets 17 in.
	tks = tks[:0]
	for range 17 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatalf("refused at %d in flight with limit %d", len(tks), l.Limit())
		}
		tks = append(tks, tk)
	}
	if _, err := l.Acquire(context.Background()); err == nil {
		t.Errorf("18th admitted under 16.2")
	}
	for _, tk := range tks {
		l.Release(tk, nil)
	}
}
