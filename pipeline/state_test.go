package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// orderTrace records whether an attempt's span started after the call's
// ended, and holds StartAttempt until released.
type orderTrace struct {
	hold        chan struct{}
	ended, late bool
	starting    chan struct{}
	endedNow    chan struct{} // closed by End, if not nil
}

func (o *orderTrace) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	if o.starting != nil {
		close(o.starting)
		<-o.hold
	}
	o.late = o.late || o.ended
	return ctx, func(error) {}
}

func (o *orderTrace) End(error) {
	o.ended = true
	if o.endedNow != nil {
		close(o.endedNow)
	}
}

// No attempt's span starts once the call's has ended, and the call's span
// ends only once an attempt's span that was starting has started, by that
// attempt's goroutine: the call returns meanwhile (a slow tracer does not
// hold it). A hedge admitted as its call returned is not sent (state.span
// says no).
func TestNoAttemptSpanAfterTheCallsEnd(t *testing.T) {
	tr := &orderTrace{}
	s := &state{trace: tr}
	s.end(nil)
	_, end, ok := s.span(context.Background(), resilience.AttemptInfo{Number: 2, Hedge: true})
	assert.False(t, ok, "a span started after the call's ended")
	assert.Nil(t, end)
	assert.False(t, tr.late)

	tr = &orderTrace{hold: make(chan struct{}), starting: make(chan struct{}), endedNow: make(chan struct{})}
	s = &state{trace: tr}
	spanned := make(chan bool)
	go func() {
		_, _, ok := s.span(context.Background(), resilience.AttemptInfo{Number: 2, Hedge: true})
		spanned <- ok
	}()
	<-tr.starting // the hedge's span is starting
	s.end(nil)    // returns at once
	select {
	case <-tr.endedNow:
		t.Fatal("the call's span ended while an attempt's was starting")
	case <-time.After(20 * time.Millisecond):
	}
	close(tr.hold)
	assert.True(t, <-spanned)
	<-tr.endedNow // ended by the attempt's goroutine, once its span started
	assert.False(t, tr.late, "the attempt's span started after the call's ended")
}
