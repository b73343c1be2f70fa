package grpcclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r130Listener struct {
	done chan error
}

func (l r130Listener) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventCallDone {
		l.done <- e.Err
	}
}

// pipeline.ErrAttemptTimeout is matched "by the error of an attempt that
// WithAttemptTimeout cut short, and by the error of a call whose last
// attempt it was"; grpcclient names it for unary calls (timedOut). A
// stream's attempts cut short the same way: the same promise.
func TestReview130StreamAttemptTimeoutIsNamed(t *testing.T) {
	srv := startR130(t)
	srv.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}))
	l := r130Listener{done: make(chan error, 10)}
	p := pipeline.New(r130Retry(2), pipeline.WithAttemptTimeout(40*time.Millisecond), pipeline.WithListener(l))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130Get, r130List))
	cc := srv.dial(t, ic.DialOptions()...)

	_, uerr := r130Call(context.Background(), cc, "x")
	uev := <-l.done
	if !errors.Is(uerr, pipeline.ErrAttemptTimeout) || !errors.Is(uev, pipeline.ErrAttemptTimeout) {
		t.Fatalf("unary: call error %v (matches %v), event %v", uerr, errors.Is(uerr, pipeline.ErrAttemptTimeout), uev)
	}
	_, serr := r130ListAll(context.Background(), cc, "x")
	sev := <-l.done
	if !errors.Is(sev, pipeline.ErrAttemptTimeout) {
		t.Errorf("stream: the call's error as the listener hears it does not match ErrAttemptTimeout: %v", sev)
	}
	if !errors.Is(serr, pipeline.ErrAttemptTimeout) {
		t.Errorf("stream: the caller's error does not match ErrAttemptTimeout: %v", serr)
	}
}
