package pipeline

// CallOption changes how one call runs through a [Pipeline].
type CallOption interface {
	applyCall(callOpts) callOpts
}

type callOpts struct {
	single     bool
	sequential bool // not hedged
	waited     bool // for the breaker (WaitWhenOpen): its attempts are paced
	discard    any  // a func(T) for results a hedged call does not return
}

type singleAttempt struct{}

func (singleAttempt) applyCall(c callOpts) callOpts {
	c.single = true
	return c
}

// callOf applies opts, nil ones skipped.
func callOf(opts []CallOption) callOpts {
	var c callOpts
	for _, o := range opts {
		if o != nil {
			c = o.applyCall(c) // by value: a pointer would escape
		}
	}
	return c
}

// SingleAttempt makes a call skip the retry and hedging stages: it makes
// one attempt, still under the time budget, the breaker, the throttle, the
// concurrency limit and the attempt timeout. For a call that is not safe to
// repeat, such as a write without an idempotency key.
func SingleAttempt() CallOption { return singleAttempt{} }

type sequential struct{}

func (sequential) applyCall(c callOpts) callOpts {
	c.sequential = true
	return c
}

// Sequential makes a call skip the hedging stage: its attempts never
// overlap, each starting after the last has ended, as without
// [WithHedging]. For an operation that cannot run twice at once, such as
// one that writes into a single result the caller holds.
func Sequential() CallOption { return sequential{} }

type discard[T any] func(T)

func (d discard[T]) applyCall(c callOpts) callOpts {
	c.discard = (func(T))(d)
	return c
}

// Discard gives a hedged call (see [WithHedging]) the way to dispose of a
// result it does not return, such as the response of an attempt that lost
// the race, or whose twin won: fn is called once for each, possibly on
// another goroutine and after the call has returned, with whatever the
// attempt returned (T's zero value included). Only a call of type T uses
// fn. Without it, such results are dropped as they are. The result that a
// race of twins ends with, when its error is retried, is dropped as in a
// call without hedging: an operation releases what it holds before it
// returns an error that may be retried (as package httpclient drains and
// closes the body of a response it retries).
func Discard[T any](fn func(T)) CallOption { return discard[T](fn) }
