// Package otelevents records what resiliencekit's stages do in
// OpenTelemetry: their events as metrics ([Listener]) and each call with
// its attempts as spans of a trace ([Tracer]).
//
// # Metrics
//
// [New] returns a [Listener] whose instruments each have a "dependency"
// attribute:
//
//   - resilience.calls: finished pipeline calls, by "outcome" (the class
//     of the error: success, transient, permanent, terminal, canceled,
//     rejected)
//   - resilience.call.duration: their duration in seconds, by outcome
//   - resilience.attempts: attempts, by outcome
//   - resilience.retries: scheduled retries
//   - resilience.giveups: calls that stopped retrying, by "reason"
//     (retries_exhausted, quota_exhausted, time_budget_exceeded,
//     not_retried)
//   - resilience.rejections: calls a breaker rejected
//   - resilience.breaker.state: a breaker's state: 0 closed, 1 half-open,
//     2 open
//
// # Traces
//
// [NewTracer] returns a [Tracer], which a pipeline's WithTracer installs.
// It records each call as a span named "resilience <dependency>" and each
// of its attempts as a child span, "resilience <dependency> attempt", in
// whose context the attempt runs. The spans that the operation starts,
// such as otelhttp's or otelgrpc's client span and through it the next
// hop's server span, are thus children of the attempt that sent them, and
// a trace shows every retry that the caller only sees as latency:
//
//	resilience payments              success, 3 attempts
//	├── resilience payments attempt  #1, transient (Error)
//	│   └── POST                     503
//	├── resilience payments attempt  #2, 100 ms after, retry-after 100 ms, transient (Error)
//	│   └── POST                     503
//	└── resilience payments attempt  #3, 180 ms after, success
//	    └── POST                     200
//
// Attempts are spans rather than span events for that reason: an event
// cannot be a parent, so with events the client spans of all attempts
// would hang side by side under the call, nothing telling which attempt
// sent which; a span also shows on the timeline how long the attempt took
// and, as the gap before it, the delay slept. A span per attempt costs
// little more than an event, and a sampler drops it with its trace; the
// attempts of a call whose span is not recording (sampled out) start no
// span at all.
//
// The spans are of kind Internal and carry these attributes:
//
//	attribute                  span     value
//	resilience.dependency      both     the pipeline's name (WithName, or its breaker's); absent if none
//	resilience.outcome         both     the class of the error (resilience.Classify): success, transient,
//	                                    permanent, terminal, canceled or rejected
//	resilience.attempts        call     the attempt spans started; 0 for a call the breaker rejected (an
//	                                    attempt refused by a client-side throttle or limit has no span)
//	resilience.attempt         attempt  its number, 1 for the first
//	resilience.delay_ms        attempt  the milliseconds waited since the previous attempt ended, the
//	                                    retry's backoff; 0 for the first attempt or a hedge
//	resilience.retry_after_ms  attempt  the dependency's hint (resilience.RetryAfter) carried by the
//	                                    previous attempt's error, the floor of the delay; absent if none
//	resilience.breaker.state   attempt  closed, half-open or open as the attempt starts; closed without
//	                                    a breaker
//	resilience.hedge           attempt  true for a hedge, sent while an earlier attempt still ran;
//	                                    absent otherwise
//
// They are prefixed, unlike the attributes of the metrics, because a span's
// attributes share it with those of other instrumentations, while a
// metric's are scoped by the instrument.
//
// An error is recorded as an exception event on the span of the attempt or
// call it ended. The span's status is Error for the failures that are not
// the caller's doing: transient, terminal (among them a rejection by an
// open breaker: a call span without attempt spans) and rejected. A
// permanent error (the request's fault, such as a 400) and a cancellation
// (the caller gave up, or a hedge lost to another attempt) leave it Unset,
// as OpenTelemetry leaves a server span's 4xx, so that the spans marked as
// errors point at the dependency and at load shed, not at callers; so
// does success, as OpenTelemetry asks of instrumentation libraries. A
// retried call that succeeds thus has a call span without error above
// attempt spans with errors.
//
// Nothing in the Tracer is particular to HTTP: over gRPC, or any
// operation, the attempt's context carries its span in the same way.
package otelevents

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener records events as metrics. It is safe for concurrent use.
type Listener struct {
	calls, attempts, retries, giveups, rejections metric.Int64Counter
	duration                                      metric.Float64Histogram
	state                                         metric.Int64Gauge
}

// New returns a Listener whose instruments come from mp's meter
// "github.com/resiliencekit/resiliencekit".
func New(mp metric.MeterProvider) (*Listener, error) {
	m := mp.Meter(scope)
	var l Listener
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{call}"))
		if err == nil {
			err = e
		}
		return c
	}
	l.calls = counter("resilience.calls", "Finished pipeline calls by outcome.")
	l.attempts = counter("resilience.attempts", "Attempts by outcome.")
	l.retries = counter("resilience.retries", "Scheduled retries.")
	l.giveups = counter("resilience.giveups", "Calls that stopped retrying, by reason.")
	l.rejections = counter("resilience.rejections", "Calls rejected by a circuit breaker.")
	if err != nil {
		return nil, err
	}
	if l.duration, err = m.Float64Histogram("resilience.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of finished pipeline calls.")); err != nil {
		return nil, err
	}
	if l.state, err = m.Int64Gauge("resilience.breaker.state",
		metric.WithDescription("Circuit breaker state: 0 closed, 1 half-open, 2 open.")); err != nil {
		return nil, err
	}
	return &l, nil
}

// stateValue is a state's value on the resilience.breaker.state gauge.
func stateValue(s resilience.State) int64 {
	switch s {
	case resilience.StateOpen:
		return 2
	case resilience.StateHalfOpen:
		return 1
	default:
		return 0
	}
}

// OnEvent records e.
func (l *Listener) OnEvent(e resilience.Event) {
	ctx := context.Background()
	dep := attribute.String("dependency", e.Name)
	outcome := func() metric.MeasurementOption {
		return metric.WithAttributes(dep, attribute.String("outcome", resilience.Classify(e.Err).String()))
	}
	switch e.Kind {
	case resilience.EventCallDone:
		o := outcome()
		l.calls.Add(ctx, 1, o)
		l.duration.Record(ctx, e.Duration.Seconds(), o)
	case resilience.EventAttempt:
		l.attempts.Add(ctx, 1, outcome())
	case resilience.EventRetry:
		l.retries.Add(ctx, 1, metric.WithAttributes(dep))
	case resilience.EventRetriesExhausted, resilience.EventQuotaExhausted, resilience.EventTimeBudgetExceeded, resilience.EventNotRetried:
		l.giveups.Add(ctx, 1, metric.WithAttributes(dep, attribute.String("reason", e.Kind.String())))
	case resilience.EventRejected:
		l.rejections.Add(ctx, 1, metric.WithAttributes(dep))
	case resilience.EventStateChange:
		l.state.Record(ctx, stateValue(e.To), metric.WithAttributes(dep))
	}
}
