package otelevents_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A nil *Listener (a field left unset, New's error ignored:
// `l, _ := otelevents.New(mp)`) given to a pipeline: the call must succeed,
// and should not pay a panic, a recover and an error log on every call,
// as a nil or zero Tracer "records nothing".
func TestReview109NilListener(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	var l *otelevents.Listener
	p := pipeline.New(pipeline.WithName("dep"), pipeline.WithListener(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))))
	for range 10 {
		if v, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); v != 1 || err != nil {
			t.Fatalf("call failed: %v %v", v, err)
		}
	}
	if n := strings.Count(buf.String(), "panicked"); n > 0 {
		t.Errorf("10 calls with a nil *otelevents.Listener logged %d panics; first: %s", n, strings.SplitN(buf.String(), "\n", 2)[0])
	}
}
