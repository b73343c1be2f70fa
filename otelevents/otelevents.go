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
//     rejected, pending; a call its caller canceled after the dependency
//     failed an attempt is canceled here, and a failure for its breaker)
//   - resilience.call.duration: their duration in seconds, by outcome
//     (of a sample of them with [SampleDurations])
//   - resilience.attempts: attempts, by outcome; an attempt that the
//     pipeline's throttle or concurrency limit refused before it was sent
//     counts too, rejected (a trace has no span for it)
//   - resilience.retries: scheduled retries
//   - resilience.giveups: calls that stopped retrying, by "reason"
//     (retries_exhausted, quota_exhausted, time_budget_exceeded,
//     not_retried)
//   - resilience.rejections: calls a breaker rejected, and attempts its
//     re-check refused as they were about to be sent
//   - resilience.breaker.state: a breaker's state: 0 closed, 1 half-open,
//     2 open; observed at each collection, from the breaker's first change
//     of state (before it, the Listener cannot tell a dependency with a
//     breaker from one without). Its "dependency" is the breaker's name
//     (breaker.New's; "NAME (fleet)" for a shared breaker's fleet), the
//     other instruments' the pipeline's (pipeline.WithName, or its
//     breaker's): give the two the same name to put them side by side
//
// The five counts are asynchronous (observable) counters, and the state an
// asynchronous gauge: the Listener counts in atomic counters of its own,
// and a reader collects their totals, so that an event costs one atomic
// addition; the duration is a synchronous histogram, recorded as each call
// ends, in seconds, with the bucket boundaries that OpenTelemetry's
// semantic conventions give http.client.request.duration (5 ms to 10 s; a
// View of the meter provider may change them). Timing a call (two
// clock reads) and recording it on an SDK histogram cost more than the
// rest of a pipeline's call: [SampleDurations] has only a sample of the
// calls timed, and the counts stay exact.
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
//	                                    permanent, terminal, canceled, rejected or pending
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
//
// Spans start and end on the call's goroutine, within its time budget, so
// the span processors run there too: give the TracerProvider a batching
// processor (sdktrace.WithBatcher), which only queues a span as it ends,
// never a synchronous one (WithSyncer) that exports it there (a 20 ms
// export per span fails a 30 ms budget that the call alone meets). A call
// whose context has ended before it starts is not run, and has no span;
// a Listener counts it: canceled, if its context was canceled; rejected,
// with a give-up (time_budget_exceeded) and a duration of 0, if its
// deadline had passed (retrypolicy.ErrOutOfTime: out of time before
// anything was sent).
package otelevents

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Listener records events as metrics. The counts are kept in counters of
// its own, one atomic addition an event, and handed to OpenTelemetry as
// asynchronous (observable) counters when a reader collects; a call's
// duration is recorded on the histogram as it ends (every call's, or a
// sample's: [SampleDurations]), with an attribute set made once per
// dependency and outcome. Recording an event allocates nothing. It is
// safe for concurrent use. It keeps each dependency name it has seen
// (about 2 KB each) for its life: name pipelines after a bounded set of
// dependencies, not after, say, every host or URL, whose metrics the SDK
// would cap anyway (2,000 data points an instrument by default).
type Listener struct {
	calls, attempts, retries, giveups, rejections metric.Int64ObservableCounter
	duration                                      metric.Float64Histogram
	state                                         metric.Int64ObservableGauge
	below                                         uint64 // SampleDurations: a call is timed if a random uint64 is below; 0: every call

	deps sync.Map            // name -> *dep
	last atomic.Pointer[dep] // the last one looked up: most events are of the dependency before
}

// classes is the number of resilience.Class values.
const classes = int(resilience.ClassPending) + 1

// giveupKinds are the events that resilience.giveups counts, by "reason".
var giveupKinds = [...]resilience.EventKind{resilience.EventRetriesExhausted, resilience.EventQuotaExhausted,
	resilience.EventTimeBudgetExceeded, resilience.EventNotRetried}

// dep is one dependency's counts, and the attribute sets of its data
// points.
type dep struct {
	name            string
	calls, attempts [classes]atomic.Int64
	giveups         [len(giveupKinds)]atomic.Int64
	retries         atomic.Int64
	rejections      atomic.Int64
	state           atomic.Int64 // stateValue of the breaker's last change; -1 before it

	set      metric.MeasurementOption
	outcome  [classes]metric.MeasurementOption
	duration [classes][]metric.RecordOption
	reason   [len(giveupKinds)]metric.MeasurementOption
}

func newDep(name string) *dep {
	a := attribute.String("dependency", name)
	d := &dep{name: name, set: metric.WithAttributeSet(attribute.NewSet(a))}
	d.state.Store(-1)
	for c := range classes {
		d.outcome[c] = metric.WithAttributeSet(attribute.NewSet(a, attribute.String("outcome", resilience.Class(c).String())))
		d.duration[c] = []metric.RecordOption{d.outcome[c]}
	}
	for i, k := range giveupKinds {
		d.reason[i] = metric.WithAttributeSet(attribute.NewSet(a, attribute.String("reason", k.String())))
	}
	return d
}

// of returns the dependency called name: inlined, most often the last
// one looked up.
func (l *Listener) of(name string) *dep {
	if d := l.last.Load(); d != nil && d.name == name {
		return d
	}
	return l.lookup(name)
}

// lookup returns the dependency called name, made if it is new.
func (l *Listener) lookup(name string) *dep {
	v, ok := l.deps.Load(name)
	if !ok {
		v, _ = l.deps.LoadOrStore(name, newDep(name))
	}
	d := v.(*dep)
	l.last.Store(d)
	return d
}

// Option configures a [Listener].
type Option interface {
	apply(*Listener)
}

type optionFunc func(*Listener)

func (f optionFunc) apply(l *Listener) { f(l) }

// SampleDurations has about one call in every n timed, chosen at random
// as each call starts, whatever it then takes and however it ends, and
// records only those on resilience.call.duration; the other calls read no
// clock and record nothing on the histogram. n of 1 or less times every
// call, the default.
//
// What it gives up: the histogram is of a sample. Its count is about 1/n
// of the calls, and its sum about 1/n of the time they took: take rates
// and totals from resilience.calls, which, like every other counter, still
// counts every call; the histogram gives the distribution, its quantiles
// estimated from the sample, less exact the fewer calls were sampled (a
// rare outcome's, or a quiet dependency's, may have no point at all in an
// export interval). A call that another listener of the same pipeline has
// timed (one that wants the end of every call, for instance) is recorded
// too, sampled or not.
//
// What it saves, on the calls not sampled: the two clock reads that time
// a call and the SDK histogram's Record, which alone can cost more than
// the rest of the call through a pipeline (see BenchmarkListener).
func SampleDurations(n int) Option {
	return optionFunc(func(l *Listener) {
		l.below = 0
		if n > 1 {
			l.below = math.MaxUint64/uint64(n) + 1 // P(below) = 1/n, to within 2^-64
		}
	})
}

// New returns a Listener whose instruments come from mp's meter
// "github.com/resiliencekit/resiliencekit"; a nil mp is the global one,
// [otel.GetMeterProvider].
func New(mp metric.MeterProvider, opts ...Option) (*Listener, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(scope)
	var l Listener
	for _, o := range opts {
		if o != nil {
			o.apply(&l)
		}
	}
	var err error
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, e := m.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithUnit("{call}"))
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
	if l.state, err = m.Int64ObservableGauge("resilience.breaker.state",
		metric.WithDescription("Circuit breaker state: 0 closed, 1 half-open, 2 open.")); err != nil {
		return nil, err
	}
	if _, err = m.RegisterCallback(l.observe, l.calls, l.attempts, l.retries, l.giveups, l.rejections, l.state); err != nil {
		return nil, err
	}
	if l.duration, err = m.Float64Histogram("resilience.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of finished pipeline calls."), metric.WithExplicitBucketBoundaries(durationBounds...)); err != nil {
		return nil, err
	}
	return &l, nil
}

// durationBounds are resilience.call.duration's bucket boundaries, in
// seconds: those of http.client.request.duration in OpenTelemetry's
// semantic conventions.
var durationBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// observe hands the counts to a reader: each data point that has counted
// something, as a synchronous counter would have made it.
func (l *Listener) observe(_ context.Context, o metric.Observer) error {
	put := func(c metric.Int64ObservableCounter, n *atomic.Int64, set metric.MeasurementOption) {
		if v := n.Load(); v > 0 {
			o.ObserveInt64(c, v, set)
		}
	}
	l.deps.Range(func(_, v any) bool {
		d := v.(*dep)
		for c := range classes {
			put(l.calls, &d.calls[c], d.outcome[c])
			put(l.attempts, &d.attempts[c], d.outcome[c])
		}
		for i := range giveupKinds {
			put(l.giveups, &d.giveups[i], d.reason[i])
		}
		put(l.retries, &d.retries, d.set)
		put(l.rejections, &d.rejections, d.set)
		if v := d.state.Load(); v >= 0 {
			o.ObserveInt64(l.state, v, d.set)
		}
		return true
	})
	return nil
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

// Wants reports whether the Listener records events of kind k: calls,
// attempts, retries, give-ups, rejections and state changes; a pipeline
// builds no other event for it. A nil Listener wants none.
func (l *Listener) Wants(k resilience.EventKind) bool {
	if l == nil {
		return false
	}
	switch k {
	case resilience.EventCallDone, resilience.EventAttempt, resilience.EventRetry, resilience.EventRejected,
		resilience.EventStateChange, resilience.EventRetriesExhausted, resilience.EventQuotaExhausted,
		resilience.EventTimeBudgetExceeded, resilience.EventNotRetried:
		return true
	}
	return false
}

// TimeCall reports whether a call that starts is to be timed for
// resilience.call.duration: every call, or, with [SampleDurations](n),
// one at random in about every n. A pipeline asks it as a call starts
// (see [resilience.CallTimer]); the end of a call it declined comes
// Untimed, and is counted but not recorded on the histogram.
func (l *Listener) TimeCall() bool {
	return l != nil && (l.below == 0 || rand.Uint64() < l.below)
}

// OnEvent records e; a nil Listener records nothing. Each kind is tested
// once, in the switch: an event of a kind the Listener does not record
// falls through it, so a wanted one is not asked about again.
func (l *Listener) OnEvent(e resilience.Event) {
	if l == nil {
		return
	}
	switch e.Kind {
	case resilience.EventCallDone:
		d := l.of(e.Name)
		c := classOf(e.Err)
		d.calls[c].Add(1)
		if !e.Untimed {
			l.duration.Record(context.Background(), e.Duration.Seconds(), d.duration[c]...)
		}
	case resilience.EventAttempt:
		l.of(e.Name).attempts[classOf(e.Err)].Add(1)
	case resilience.EventRetry:
		l.of(e.Name).retries.Add(1)
	case resilience.EventRejected:
		if e.Attempt == 0 { // a call the breaker refused; not a stop between retries
			l.of(e.Name).rejections.Add(1)
		}
	case resilience.EventStateChange:
		l.of(e.Name).state.Store(stateValue(e.To))
	case resilience.EventRetriesExhausted, resilience.EventQuotaExhausted, resilience.EventTimeBudgetExceeded,
		resilience.EventNotRetried:
		d := l.of(e.Name)
		for i, k := range giveupKinds {
			if k == e.Kind {
				d.giveups[i].Add(1)
			}
		}
	}
}

// classOf is err's class, one that resilience does not name (an error's
// own ResilienceClass past ClassPending) counted as transient, as
// Classify counts an error without a class.
func classOf(err error) (c resilience.Class) {
	if err == nil { // most calls: no call of Classify
		return resilience.ClassSuccess
	}
	defer func() {
		if recover() != nil { // a method of err's panicked: counted, as an unknown class
			c = resilience.ClassTransient
		}
	}()
	if c := resilience.Classify(err); int(c) < classes {
		return c
	}
	return resilience.ClassTransient
}
