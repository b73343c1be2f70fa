package otelevents_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r61BadErr struct{ class *resilience.Class }

func (e *r61BadErr) Error() string                     { return "bad" }
func (e *r61BadErr) ResilienceClass() resilience.Class { return *e.class } // nil: panics

// TestReview61HostileErrorClass: an operation's error whose
// ResilienceClass panics (a typed nil's field). The registry counts such an
// error safely (classify.Safely); otelevents' classOf calls
// resilience.Classify unguarded: is the call still counted?
func TestReview61HostileErrorClass(t *testing.T) {
	l, rd := r61New(t)
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("dep", breaker.ConsecutiveFailures(1<<30))), pipeline.WithListener(l)))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for range n {
		func() {
			defer func() { recover() }() // in case the pipeline itself panics
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, &r61BadErr{} })
		}()
	}
	s := r61Sums(t, rd)
	ps := reg.Snapshot().Pipelines[0]
	t.Logf("registry calls=%d attempts=%d fail=%d; otel calls=%v attempts=%v", ps.Calls, ps.Attempts, ps.Failures, s["resilience.calls"], s["resilience.attempts"])
	if r61Total(s["resilience.calls"]) != n || r61Total(s["resilience.attempts"]) != n {
		t.Errorf("otel dropped calls/attempts whose error's ResilienceClass panics: calls %d attempts %d, want %d", r61Total(s["resilience.calls"]), r61Total(s["resilience.attempts"]), n)
	}
}

// TestReview61Cardinality: 5,000 hostile dependency names (long, markup,
// control characters, invalid UTF-8) and 5,000 distinct error strings. The
// error string is never an attribute; the outcome is one of six.
func TestReview61Cardinality(t *testing.T) {
	l, rd := r61New(t)
	for i := range 5000 {
		name := fmt.Sprintf("dep-%d-%s\xff\x00<script>", i%50, strings.Repeat("x", i%7))
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: name, Err: fmt.Errorf("error %d", i)})
		l.OnEvent(resilience.Event{Kind: resilience.EventAttempt, Name: name, Err: fmt.Errorf("error %d", i), Attempt: i})
	}
	s := r61Sums(t, rd)
	if len(s["resilience.calls"]) > 350*6 || len(s["resilience.attempts"]) > 350*6 {
		t.Errorf("calls points %d, attempts points %d", len(s["resilience.calls"]), len(s["resilience.attempts"]))
	}
	for k := range s["resilience.calls"] {
		o := k[strings.LastIndex(k, "|")+1:]
		switch o {
		case "success", "transient", "permanent", "terminal", "canceled", "rejected":
		default:
			t.Errorf("outcome %q", o)
		}
	}
	if r61Total(s["resilience.calls"]) != 5000 {
		t.Errorf("calls %d", r61Total(s["resilience.calls"]))
	}
}

// r61HighClass is an error of a class past ClassRejected.
type r61HighClass struct{}

func (r61HighClass) Error() string                     { return "high" }
func (r61HighClass) ResilienceClass() resilience.Class { return resilience.Class(200) }

func TestReview61UnknownClass(t *testing.T) {
	l, rd := r61New(t)
	l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: "d", Err: r61HighClass{}})
	s := r61Sums(t, rd)
	if s["resilience.calls"]["d|transient"] != 1 {
		t.Errorf("%v", s["resilience.calls"])
	}
}
