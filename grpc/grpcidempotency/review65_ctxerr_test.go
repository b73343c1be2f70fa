package grpcidempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A handler that returns its context's error as is (or wrapped, as a
// database driver does) tells its client DEADLINE_EXCEEDED / CANCELED:
// grpc-go converts context errors. The retry, with a fresh deadline, runs
// the handler against a plain server and succeeds.
func TestReview65BareContextErrorIsNotAFinalAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wrap   func(error) error
		cancel bool
	}{
		{"deadline-bare", func(e error) error { return e }, false},
		{"deadline-wrapped", func(e error) error { return fmt.Errorf("query: %w", e) }, false},
		{"canceled-bare", func(e error) error { return e }, true},
	} {
		for _, plain := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/plain=%v", tc.name, plain), func(t *testing.T) {
				first := make(chan struct{}, 1)
				first <- struct{}{}
				h := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
					select {
					case <-first:
						<-ctx.Done()
						dl, _ := ctx.Deadline()
						t.Logf("handler saw %v cause %v deadline-passed=%v", ctx.Err(), context.Cause(ctx), time.Now().After(dl))
						time.Sleep(20 * time.Millisecond)
						return nil, tc.wrap(ctx.Err())
					default:
						return wrapperspb.String("ok:" + in.Value), nil
					}
				}
				r := r65Start(t, idempotency.NewGuard(idempotency.NewMemoryStore(0)), plain, h)
				cc := r.dial(t)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				if tc.cancel {
					cancel()
					var cancelNow context.CancelFunc
					ctx, cancelNow = context.WithCancel(context.Background())
					time.AfterFunc(100*time.Millisecond, cancelNow)
					cancel = cancelNow
				}
				_, err := r65Call(ctx, cc, r65Method, "k1", "a")
				cancel()
				t.Logf("first: %v", status.Code(err))
				time.Sleep(100 * time.Millisecond)
				ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel2()
				out, err := r65Call(ctx2, cc, r65Method, "k1", "a")
				if err != nil || out != "ok:a" {
					t.Errorf("retry with a fresh deadline: %q, %v (code %v), runs=%d; a plain server runs it and answers ok:a", out, err, status.Code(err), r.runs.Load())
				}
			})
		}
	}
}
