// Command grpc shows the resilient gRPC client against a local grpc-go
// server over TCP: unary calls riding out UNAVAILABLE, a method that is
// not idempotent tried once unless it carries an idempotency key (then
// run once by the server however often it is sent), a pushback that
// stops the retries, a server stream retried before its first message
// and not after, a client stream replayed, and a breaker that opens and
// fails fast.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	fmt.Fprint(w, `Legend: each line is one call through the client: the status it got (OK or
the gRPC code), its answer, and how many attempts the test server received for
it (an attempt is a run of the server's handler, failed ones included).

`)
	srv, err := grpctest.Start(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())))
	if err != nil {
		return err
	}
	defer srv.Close()
	retry := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(20*time.Millisecond))
	interceptor := grpcclient.New(
		grpcclient.WithPipeline(pipeline.New(pipeline.WithTimeBudget(2*time.Second), pipeline.WithRetry(retry))),
		grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker {
			return breaker.New(target, breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
		}),
	)
	conn, err := grpctest.Dial(srv.Addr, interceptor.DialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := grpctest.NewClient(conn)
	ctx := context.Background()
	result := func(err error) string {
		if err == nil {
			return "OK"
		}
		return status.Code(err).String()
	}

	fmt.Fprintln(w, "1. The server answers UNAVAILABLE twice, then OK")
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 2})
	got, err := client.Get(ctx, "a")
	fmt.Fprintf(w, "  Get (NO_SIDE_EFFECTS): %s %q after %d attempts\n", result(err), got, srv.Count(grpctest.Get))
	srv.Reset()

	fmt.Fprintln(w, "2. A method that is not idempotent, the server failing once")
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	_, err = client.Create(ctx, "order-1")
	fmt.Fprintf(w, "  Create without a key: %s after %d attempt\n", result(err), srv.Count(grpctest.Create))
	srv.Reset()
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	got, err = client.Create(ctx, "order-2", grpcclient.IdempotencyKey("order-2"))
	fmt.Fprintf(w, "  Create with a key: %s %q after %d attempts\n", result(err), got, srv.Count(grpctest.Create))
	_, err = client.Create(ctx, "order-2", grpcclient.IdempotencyKey("order-2"))
	fmt.Fprintf(w, "  the same key again: %s, replayed: the handler ran %d times in all (the failed first attempt and the one that succeeded; not again for the replay)\n", result(err), srv.Count(grpctest.Create))
	srv.Reset()

	fmt.Fprintln(w, "3. A pushback in the trailer")
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.ResourceExhausted, Pushback: "200", Calls: 1})
	start := time.Now()
	_, err = client.Get(ctx, "a")
	fmt.Fprintf(w, "  pushback 200 ms: %s after %d attempts, waited at least 200 ms: %v\n", result(err), srv.Count(grpctest.Get), time.Since(start) >= 200*time.Millisecond)
	srv.Reset()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.ResourceExhausted, Pushback: "-1", Calls: 1})
	_, err = client.Get(ctx, "a")
	fmt.Fprintf(w, "  pushback -1 (don't retry): %s after %d attempt\n", result(err), srv.Count(grpctest.Get))
	srv.Reset()

	fmt.Fprintln(w, "4. Streams")
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, After: 0, Calls: 1})
	items, err := client.List(ctx, "item")
	fmt.Fprintf(w, "  List failing before its first message: %s %q after %d attempts\n", result(err), items, srv.Count(grpctest.List))
	srv.Reset()
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, After: 1, Calls: 1})
	items, err = client.List(ctx, "item")
	fmt.Fprintf(w, "  List failing after its first message: %s %q after %d attempt (committed)\n", result(err), items, srv.Count(grpctest.List))
	srv.Reset()
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 2, Calls: 1})
	joined, err := client.Upload(ctx, []string{"a", "b", "c"})
	calls := srv.Calls(grpctest.Upload)
	fmt.Fprintf(w, "  Upload failing after 2 messages: %s %q; the server got %q, then %q\n", result(err), joined, calls[0].Received, calls[len(calls)-1].Received)
	srv.Reset()

	fmt.Fprintln(w, "5. The server is down")
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	for i := range 5 {
		start := time.Now()
		_, err := client.Get(ctx, "a")
		fmt.Fprintf(w, "  call %d: %s, breaker open: %-5v, in %s\n", i+1, result(err), errors.Is(err, breaker.ErrOpen), bucket(time.Since(start)))
	}
	fmt.Fprintf(w, "  the server got %d attempts: 3 calls of 3 attempts opened the breaker; the rest failed fast\n", srv.Count(grpctest.Get))
	return nil
}

// bucket says roughly how long a call took, so that the output is the
// same from run to run.
func bucket(d time.Duration) string {
	if d < 10*time.Millisecond {
		return "under 10 ms"
	}
	return "10 ms or more"
}
