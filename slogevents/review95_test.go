package slogevents_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

type r95Buf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *r95Buf) Write(p []byte) (int, error) { w.mu.Lock(); defer w.mu.Unlock(); return w.b.Write(p) }
func (w *r95Buf) String() string              { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

type r95NilErr struct{ msg *string }

func (e *r95NilErr) Error() string { return *e.msg }

// An error whose Error panics, through a pipeline: the call is unchanged.
func TestReview95PanickingErrorThroughPipeline(t *testing.T) {
	var buf r95Buf
	l := slogevents.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	p := pipeline.New(pipeline.WithName("pe"), pipeline.WithListener(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))))
	var typedNil *r95NilErr
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, typedNil })
	if err == nil {
		t.Fatal("no error")
	}
	out := buf.String()
	if !strings.Contains(out, "resilience retries_exhausted") || !strings.Contains(out, "!PANIC") {
		t.Errorf("the retries' end was not logged with the error's panic in its place:\n%s", out)
	}
}
