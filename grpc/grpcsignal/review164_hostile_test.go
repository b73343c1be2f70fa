package grpcsignal_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r164Cyclic is a handler's error that carries its status and wraps
// itself (a cycle, as a careless Unwrap makes): grpc-go answers its
// status at once (errors.As stops at the top).
type r164Cyclic struct {
	st   *status.Status
	next error
}

func (e *r164Cyclic) Error() string              { return "cyclic: " + e.st.Message() }
func (e *r164Cyclic) GRPCStatus() *status.Status { return e.st }
func (e *r164Cyclic) Unwrap() error              { return e.next }

// r164Panicky carries its status, and its Is (or its Unwrap) panics, as
// a typed nil's method might.
type r164PanicIs struct{ st *status.Status }

func (e *r164PanicIs) Error() string              { return e.st.Message() }
func (e *r164PanicIs) GRPCStatus() *status.Status { return e.st }
func (e *r164PanicIs) Is(error) bool              { panic("Is panics") }
func (e *r164PanicIs) Unwrap() error              { panic("Unwrap panics") }

type r164Fixed struct{ err func() error }

func (f r164Fixed) call(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return nil, f.err()
}
func (f r164Fixed) watch(*wrapperspb.StringValue, grpc.ServerStream) error { return f.err() }

// (2) do no harm: a handler error that grpc-go answers at once must be
// answered at once through the interceptors too (no hang, no crash).
func TestReview164InterceptorHostileHandlerErrors(t *testing.T) {
	mk := map[string]func() error{
		"selfCycle": func() error {
			e := &r164Cyclic{st: status.New(codes.Unavailable, "x")}
			e.next = e
			return e
		},
		"twoCycle": func() error {
			a := &r164Cyclic{st: status.New(codes.Unavailable, "x")}
			b := &r164Cyclic{st: status.New(codes.Unavailable, "y"), next: a}
			a.next = b
			return a
		},
		"panicIs": func() error { return &r164PanicIs{st: status.New(codes.Unavailable, "x")} },
	}
	for name, f := range mk {
		for _, unary := range []bool{true, false} {
			t.Run(name+map[bool]string{true: "/unary", false: "/stream"}[unary], func(t *testing.T) {
				n := r164Net{}
				// control: grpc-go alone answers at once
				plain := r164Dial(t, n.serve(t, r164Fixed{f}, false), false, nil)
				cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer ccancel()
				if _, err := (&r164Chain{a: plain}).unary(cctx); status.Code(err) != codes.Unavailable {
					t.Fatalf("control: a plain server answered %v", err)
				}
				s := n.serve(t, r164Fixed{f}, true)
				cc := r164Dial(t, s, false, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				start := time.Now()
				var err error
				ch := &r164Chain{a: cc}
				done := make(chan struct{})
				go func() {
					defer close(done)
					if unary {
						_, err = ch.unary(ctx)
					} else {
						_, err = ch.watch(ctx)
					}
				}()
				<-done
				if d := time.Since(start); d > time.Second || status.Code(err) != codes.Unavailable {
					t.Errorf("through the interceptors: %v after %v; a plain server answers UNAVAILABLE at once", err, d)
				}
			})
		}
	}
}

// (2) the smallest reproduction: Code, and retrysignal.Retried (which
// the interceptors ask first), never return for an error that wraps
// itself, where grpc-go's status.FromError answers at once.
func TestReview164CodeOfCyclicError(t *testing.T) {
	e := &r164Cyclic{st: status.New(codes.Unavailable, "x")}
	e.next = e
	if st, ok := status.FromError(e); !ok || st.Code() != codes.Unavailable {
		t.Fatalf("control: status.FromError = %v, %v", st, ok)
	}
	for name, f := range map[string]func(error) any{
		"retrysignal.Retried": func(err error) any { return retrysignal.Retried(err) },
		"grpcsignal.Code":     func(err error) any { return grpcsignal.Code(err) },
	} {
		done := make(chan any, 1)
		go func() { done <- f(e) }() // leaks a spinning goroutine if it hangs
		select {
		case v := <-done:
			t.Logf("%s = %v", name, v)
		case <-time.After(time.Second):
			t.Errorf("%s does not return for an error that wraps itself", name)
		}
	}
}
