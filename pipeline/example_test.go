package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Receipt, Order and paymentsClient stand in for a payments service's SDK.
type Receipt struct{ ID string }

type Order struct {
	ID    string
	Cents int
}

// paymentsClient fails with each of fails in turn, then charges.
type paymentsClient struct {
	fails []error
	calls int
}

func (c *paymentsClient) Charge(ctx context.Context, o Order) (Receipt, error) {
	c.calls++
	if c.calls <= len(c.fails) {
		return Receipt{}, c.fails[c.calls-1]
	}
	return Receipt{ID: "receipt-" + o.ID}, nil
}

// The README's quick start: one pipeline per dependency.
func Example() {
	ctx := context.Background()
	client := &paymentsClient{fails: []error{errors.New("connection reset")}}
	order := Order{ID: "17", Cents: 1299}

	payments := breaker.New("payments") // one per dependency, shared by every caller
	charge := pipeline.New(
		pipeline.WithTimeBudget(2*time.Second), // the whole call, retries included
		pipeline.WithBreaker(payments),         // opens after 5 failures in a row
		pipeline.WithRetry(retrypolicy.New( // full jitter, 100 ms base, 10 s cap
			retrypolicy.MaxAttempts(3),
		)),
		// No attempt timeout: add one (WithAttemptTimeout) only where an attempt
		// can hang, and above the dependency's slowest healthy answer, queueing
		// included; below it, a slowdown fails healthy calls (docs/retries.md).
	)

	receipt, err := pipeline.Do(ctx, charge, func(ctx context.Context) (Receipt, error) {
		return client.Charge(ctx, order) // ctx carries the remaining budget as its deadline
	})
	fmt.Println(receipt.ID, err, client.calls)
	// Output: receipt-17 <nil> 2
}

// describe is the README's switch over what a pipeline call returns.
func describe(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, breaker.ErrOpen), errors.Is(err, breaker.ErrTooManyRequests): // failed fast: not sent
		return "breaker open"
	case errors.Is(err, retrypolicy.ErrOutOfTime): // the time budget or the caller's deadline ran out
		return "out of time"
	case errors.Is(err, context.Canceled): // the caller gave up
		return "canceled"
	case resilience.IsPermanent(err): // a bad request: retrying will not help
		return "bad request"
	case resilience.Classify(err) == resilience.ClassRejected: // shed on this side, or the caller's own error: not sent
		return "not sent"
	default: // the dependency failed: a 500, or retries used up
		return "dependency failed"
	}
}

// Telling what went wrong: each error matches what happened, and only that.
func ExampleDo_errors() {
	fail := func(err error) resilience.Operation[Receipt] {
		return func(context.Context) (Receipt, error) { return Receipt{}, err }
	}
	payments := breaker.New("payments", breaker.ConsecutiveFailures(1))
	charge := pipeline.New(pipeline.WithBreaker(payments))

	_, err := pipeline.Do(context.Background(), charge, fail(resilience.Permanent(errors.New("400 card declined"))))
	fmt.Println(describe(err))
	_, err = pipeline.Do(context.Background(), charge, fail(resilience.Terminal(errors.New("500 internal error"))))
	fmt.Println(describe(err))
	_, err = pipeline.Do(context.Background(), charge, fail(nil)) // the 500 opened the breaker
	fmt.Println(describe(err))

	hung := func(ctx context.Context) (Receipt, error) {
		<-ctx.Done() // a hung dependency
		return Receipt{}, ctx.Err()
	}
	slow := pipeline.New(pipeline.WithTimeBudget(10 * time.Millisecond))
	_, err = pipeline.Do(context.Background(), slow, hung)
	fmt.Println(describe(err))

	// Attempts that each time out, within a time budget that lasts: the
	// dependency failed, the call did not run out of time.
	impatient := pipeline.New(pipeline.WithAttemptTimeout(time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	_, err = pipeline.Do(context.Background(), impatient, hung)
	fmt.Println(describe(err))

	// The caller's own doing: it gave up, or its request could not be made
	// (as httpclient marks a bad URL or a body it cannot encode).
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = pipeline.Do(gone, slow, hung)
	fmt.Println(describe(err))
	_, err = pipeline.Do(context.Background(), slow, fail(resilience.Rejected(errors.New(`parse "http://[::1": missing ']'`))))
	fmt.Println(describe(err))
	// Output:
	// bad request
	// dependency failed
	// breaker open
	// out of time
	// dependency failed
	// canceled
	// not sent
}
