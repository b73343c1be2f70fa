// Command firsthour is the first program a user of resiliencekit writes:
//
//  1. an HTTP dependency that fails now and then (a local server answering
//     503 to one request in two), called through the resilient client with
//     a circuit breaker, jittered retries and every event logged by
//     log/slog;
//  2. the same dependency gone dead, where the breaker opens and calls fail
//     fast without being sent;
//  3. a function of your own, not HTTP, wrapped with pipeline.Do.
//
// Run it with `go run ./examples/firsthour`; it takes about a second.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

func main() { run(os.Stdout) }

func run(out io.Writer) {
	fmt.Fprint(out, `Legend:
  server: request N -> S  the flaky dependency received request N (retries
                          included) and answered status S
  level=WARN msg=...      an event of the pipeline, logged by slogevents: retries
                          given up, a change of the breaker's state
  call N: ...             what the caller got back: the answer, or the error
  server saw N requests   what the dependency received for the calls above
  prices: try N           your own function ran for the Nth time

`)
	// A flaky dependency: every second request fails with 503, until dead.
	var requests atomic.Int64
	var dead atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		if dead.Load() || n%2 == 1 {
			fmt.Fprintf(out, "  server: request %d -> 503\n", n)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(out, "  server: request %d -> 200\n", n)
		fmt.Fprintf(w, `{"sku":"A1","stock":%d}`, 40+n)
	}))
	defer srv.Close()

	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		// Info: give-ups and state changes; Debug would add every attempt,
		// retry and open-breaker rejection.
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey { // shorter lines
				return slog.Attr{}
			}
			return a
		},
	}))

	// One pipeline per dependency, shared by every caller.
	inventory := pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(breaker.New("inventory",
			breaker.ConsecutiveFailures(2), // calls, not attempts: a retried blip is no strike,
			breaker.OpenTimeout(5*time.Second),
		)),
		pipeline.WithRetry(retrypolicy.New(
			retrypolicy.MaxAttempts(3),
			retrypolicy.BaseDelay(20*time.Millisecond),
		)),
		pipeline.WithAttemptTimeout(500*time.Millisecond),
		pipeline.WithListener(slogevents.New(logger)),
	)
	client := httpclient.New(httpclient.WithPipeline(inventory))
	ctx := context.Background()

	fmt.Fprintln(out, "== 1. a flaky dependency: each call's 503 is retried and the call succeeds")
	for i := 1; i <= 2; i++ {
		var item struct {
			SKU   string
			Stock int
		}
		err := client.GetJSON(ctx, srv.URL+"/items/A1", &item)
		fmt.Fprintf(out, "call %d: stock=%d err=%v\n", i, item.Stock, err)
	}
	fmt.Fprintf(out, "server saw %d requests for 2 calls\n\n", requests.Load())

	fmt.Fprintln(out, "== 2. the dependency dies: the breaker opens, later calls fail fast, unsent")
	dead.Store(true)
	before := requests.Load()
	for i := 3; i <= 6; i++ {
		var item struct{ Stock int }
		err := client.GetJSON(ctx, srv.URL+"/items/A1", &item)
		fmt.Fprintf(out, "call %d: breaker open=%v err=%v\n", i, errors.Is(err, breaker.ErrOpen), err)
	}
	fmt.Fprintf(out, "server saw %d requests for 4 calls\n\n", requests.Load()-before)

	fmt.Fprintln(out, "== 3. your own function, not HTTP, through a pipeline of its own")
	var tries int
	price, err := pipeline.Do(ctx, pipeline.New(
		pipeline.WithName("prices"),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(10*time.Millisecond))),
		pipeline.WithListener(slogevents.New(logger)),
	), func(ctx context.Context) (float64, error) {
		tries++
		fmt.Fprintf(out, "  prices: try %d\n", tries)
		if tries < 3 {
			return 0, errors.New("price service: connection reset")
		}
		return 9.99, nil
	})
	fmt.Fprintf(out, "call 7: price=%.2f err=%v after %d tries\n", price, err, tries)
}
