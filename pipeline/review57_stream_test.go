package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A bulkhead of 1 and DoStream: the result (an HTTP body, say) is still
// being read from the dependency until release. The attempt's slot is
// given back as op returns, as WithLimit's and DoStream's docs say, so a
// second streamed call is admitted while the first's result is read.
func TestReview57StreamedResultHoldsNoSlot(t *testing.T) {
	l := limit.NewFixed(1)
	p := pipeline.New(pipeline.WithLimit(l), pipeline.WithAttemptTimeout(time.Second))
	op := func(ctx context.Context) (<-chan struct{}, error) {
		return ctx.Done(), nil // the "body", readable while ctx lives
	}
	_, rel1, err := pipeline.DoStream(context.Background(), p, op)
	if err != nil {
		t.Fatal(err)
	}
	defer rel1()
	_, rel2, err2 := pipeline.DoStream(context.Background(), p, op)
	defer rel2()
	if err2 != nil || l.InFlight() != 0 {
		t.Errorf("second streamed call while the first's result is unreleased: err %v, in flight %d; the slot is given back as op returns (WithLimit, DoStream)", err2, l.InFlight())
	}
}
