package otelevents

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// scope names the meter and the tracer of the package.
const scope = "github.com/resiliencekit/resiliencekit"

// The attribute keys of the spans; the table in the package doc says what
// each holds.
const (
	keyDependency = attribute.Key("resilience.dependency")
	keyOutcome    = attribute.Key("resilience.outcome")
	keyAttempts   = attribute.Key("resilience.attempts")
	keyAttempt    = attribute.Key("resilience.attempt")
	keyDelay      = attribute.Key("resilience.delay_ms")
	keyRetryAfter = attribute.Key("resilience.retry_after_ms")
	keyState      = attribute.Key("resilience.breaker.state")
	keyHedge      = attribute.Key("resilience.hedge")
)

// Tracer records each pipeline call as a span and each of its attempts as
// a child span of it, in whose context the attempt runs; it implements
// [resilience.Tracer] (install it with the pipeline's WithTracer). Make one
// with [NewTracer]; a nil or zero Tracer records nothing. It is safe for
// concurrent use, and one Tracer may serve every pipeline.
type Tracer struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue // WithAttributes', on every span
	deps   sync.Map             // dependency name -> *dependency, up to maxDependencies
	ndeps  atomic.Int32
}

var _ resilience.Tracer = (*Tracer)(nil)

// maxDependencies caps the dependencies whose span names and attributes a
// Tracer keeps, for when pipelines are named after, say, hosts without end:
// beyond it they are made for each call.
const maxDependencies = 256

// kindInternal is the span start option of every span.
var kindInternal = trace.WithSpanKind(trace.SpanKindInternal)

// TracerOption configures a [Tracer].
type TracerOption interface {
	applyTracer(*Tracer)
}

type attributesOption []attribute.KeyValue

func (o attributesOption) applyTracer(t *Tracer) { t.attrs = append(t.attrs, o...) }

// WithAttributes adds kv to every span the [Tracer] starts, calls' and
// attempts', such as a peer.service naming the dependency. Default none.
func WithAttributes(kv ...attribute.KeyValue) TracerOption {
	return attributesOption(kv)
}

// NewTracer returns a Tracer whose spans come from tp's tracer
// "github.com/resiliencekit/resiliencekit"; a nil tp means
// [otel.GetTracerProvider].
func NewTracer(tp trace.TracerProvider, opts ...TracerOption) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &Tracer{tracer: tp.Tracer(scope)}
	for _, o := range opts {
		if o != nil {
			o.applyTracer(t)
		}
	}
	return t
}

// StartCall starts the span of a call to the dependency name, named
// "resilience " and name, as a child of the span in ctx, and returns ctx
// with it. The call's End ends it.
func (t *Tracer) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	if t == nil || t.tracer == nil {
		return ctx, noCall{}
	}
	c := &call{t: t, dep: t.dependency(name)}
	ctx, c.span = t.tracer.Start(ctx, c.dep.callName, c.dep.start...)
	return ctx, c
}

// dependency is what the spans of one dependency's calls share.
type dependency struct {
	callName, attemptName string
	attrs                 []attribute.KeyValue    // of every span: the dependency's name, if any, and the Tracer's
	start                 []trace.SpanStartOption // of a call span
}

// dependency returns the shared part of the spans of calls to name.
func (t *Tracer) dependency(name string) *dependency {
	if d, ok := t.deps.Load(name); ok {
		return d.(*dependency)
	}
	d := &dependency{callName: "resilience", attemptName: "resilience attempt"}
	if name != "" {
		d.callName = "resilience " + name
		d.attemptName = d.callName + " attempt"
		d.attrs = append(d.attrs, keyDependency.String(name))
	}
	d.attrs = append(d.attrs, t.attrs...)
	d.start = []trace.SpanStartOption{kindInternal, trace.WithAttributes(d.attrs...)}
	if t.ndeps.Add(1) > maxDependencies { // a place taken before the name is kept: never more
		t.ndeps.Add(-1)
		return d
	}
	if kept, loaded := t.deps.LoadOrStore(name, d); loaded {
		t.ndeps.Add(-1)
		return kept.(*dependency)
	}
	return d
}

// call is the trace of one call: its span and the attempts it started.
type call struct {
	t        *Tracer
	dep      *dependency
	span     trace.Span
	attempts atomic.Int64
}

// StartAttempt starts the span of attempt a, named "resilience <name>
// attempt", as a child of the call's span, and returns ctx with it.
func (c *call) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	c.attempts.Add(1)
	if !c.span.IsRecording() {
		// Sampled out: the attempt's spans would be too, and the next
		// hop learns as much from the call's span context.
		return ctx, ignore
	}
	if trace.SpanContextFromContext(ctx).SpanID() != c.span.SpanContext().SpanID() {
		ctx = trace.ContextWithSpan(ctx, c.span) // an attempt's parent is its call, never a sibling
	}
	kv := make([]attribute.KeyValue, 0, len(c.dep.attrs)+5)
	kv = append(append(kv, c.dep.attrs...),
		keyAttempt.Int(a.Number),
		keyDelay.Float64(ms(a.Delay)),
		keyState.String(a.State.String()))
	if a.RetryAfter > 0 {
		kv = append(kv, keyRetryAfter.Float64(ms(a.RetryAfter)))
	}
	if a.Hedge {
		kv = append(kv, keyHedge.Bool(true))
	}
	ctx, span := c.t.tracer.Start(ctx, c.dep.attemptName, kindInternal, trace.WithAttributes(kv...))
	return ctx, func(err error) { end(span, err) }
}

// End ends the call's span with its outcome and the attempts it made.
func (c *call) End(err error) {
	if c.span.IsRecording() {
		c.span.SetAttributes(keyAttempts.Int64(c.attempts.Load()))
	}
	end(c.span, err)
}

// end ends span with the outcome of err, recorded as an exception event if
// not nil, and the status Error if the class of err is a failure that is
// not the caller's doing (see the package doc). The span ends even if
// err's methods panic.
func end(span trace.Span, err error) {
	defer span.End()
	if span.IsRecording() {
		class := classOf(err)
		span.SetAttributes(keyOutcome.String(class.String()))
		if err != nil {
			span.RecordError(err)
			if class == resilience.ClassTransient || class == resilience.ClassTerminal || class == resilience.ClassRejected {
				span.SetStatus(codes.Error, err.Error())
			}
		}
	}
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ignore ends an attempt that has no span.
func ignore(error) {}

// noCall is the trace of a call that a nil or zero Tracer records.
type noCall struct{}

func (noCall) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, ignore
}

func (noCall) End(error) {}
