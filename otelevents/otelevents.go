// Package otelevents records the events of resiliencekit's stages as
// OpenTelemetry metrics, every instrument with a "dependency" attribute:
//
//   - resilience.calls: finished pipeline calls, by "outcome" (the class
//     of the error: success, transient, permanent, terminal, canceled)
//   - resilience.call.duration: their duration in seconds, by outcome
//   - resilience.attempts: attempts, by outcome
//   - resilience.retries: scheduled retries
//   - resilience.giveups: calls that stopped retrying, by "reason"
//     (retries_exhausted, quota_exhausted, time_budget_exceeded,
//     not_retried)
//   - resilience.rejections: calls a breaker rejected
//   - resilience.breaker.state: a breaker's state: 0 closed, 1 half-open,
//     2 open
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
	m := mp.Meter("github.com/resiliencekit/resiliencekit")
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
