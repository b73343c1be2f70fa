package pipeline_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r95NilErr struct{ msg *string }

func (e *r95NilErr) Error() string { return *e.msg }

type r95BadText struct{}

func (r95BadText) MarshalText() ([]byte, error) { panic("MarshalText boom") }

// A listener that panics with a value whose Error (JSON handler) or
// MarshalText (any handler) panics: the toolkit logs the panic value with
// slog, which formats it; does the second panic escape into the caller?
func r95PanicValue(t *testing.T, h slog.Handler, v any) (escaped any) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventCallDone {
			panic(v)
		}
	})
	p := pipeline.New(pipeline.WithName("x"), pipeline.WithListener(l))
	defer func() { escaped = recover() }()
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Errorf("call failed: %v", err)
	}
	return nil
}

func TestReview95ListenerPanicValueWithPanickingError(t *testing.T) {
	var buf bytes.Buffer
	var typedNil *r95NilErr
	if r := r95PanicValue(t, slog.NewJSONHandler(&buf, nil), error(typedNil)); r != nil {
		t.Errorf("JSON handler: a listener's panic escaped into the call: %v", r)
	}
	if r := r95PanicValue(t, slog.NewTextHandler(&buf, nil), r95BadText{}); r != nil {
		t.Errorf("Text handler: a listener's panic escaped into the call: %v", r)
	}
	if r := r95PanicValue(t, slog.NewJSONHandler(&buf, nil), r95BadText{}); r != nil {
		t.Errorf("JSON handler (TextMarshaler): a listener's panic escaped into the call: %v", r)
	}
}

var _ = retrypolicy.New
