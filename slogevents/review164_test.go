package slogevents_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/slogevents"
)

// r164Rec records the records a logger gets.
type r164Rec struct {
	mu    sync.Mutex
	level slog.Leveler
	recs  []slog.Record
}

func (h *r164Rec) Enabled(_ context.Context, l slog.Level) bool {
	lv := slog.LevelInfo
	if h.level != nil {
		lv = h.level.Level()
	}
	return l >= lv
}

func (h *r164Rec) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *r164Rec) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *r164Rec) WithGroup(string) slog.Handler      { return h }

func (h *r164Rec) find(msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

func r164Attr(r slog.Record, key string) (string, bool) {
	var v string
	ok := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, ok = a.Value.String(), true
			return false
		}
		return true
	})
	return v, ok
}

var errR164 = errors.New("r164 boom")

// (4) through a real pipeline at Info: retries given up on and the
// breaker opening at Warn, the breaker's way back (half-open, closed) at
// Info; a call made single that failed (not retried) at Info. Fake time.
func TestReview164RequiredEventsAtInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &r164Rec{level: slog.LevelInfo}
		l := slogevents.New(slog.New(h))
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p := pipeline.New(pipeline.WithName("dep"), pipeline.WithBreaker(b), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))))
		fail := func(context.Context) (int, error) { return 0, errR164 }
		ok := func(context.Context) (int, error) { return 1, nil }

		_, _ = pipeline.Do(context.Background(), p, fail) // opens at once (1 failure): retry rejected
		time.Sleep(2 * time.Second)
		if _, err := pipeline.Do(context.Background(), p, ok); err != nil {
			t.Fatalf("probe failed: %v", err)
		}
		_, _ = pipeline.Do(context.Background(), p, fail, pipeline.SingleAttempt())

		var opened, back, closed int
		for _, r := range h.find("resilience " + resilience.EventStateChange.String()) {
			to, _ := r164Attr(r, "to")
			switch to {
			case "open":
				opened++
				if r.Level != slog.LevelWarn {
					t.Errorf("opening at %v, want Warn", r.Level)
				}
			case "half-open":
				back++
				if r.Level != slog.LevelInfo {
					t.Errorf("half-open at %v, want Info", r.Level)
				}
			case "closed":
				closed++
				if r.Level != slog.LevelInfo {
					t.Errorf("closed at %v, want Info", r.Level)
				}
			}
			if d, _ := r164Attr(r, "dependency"); d != "dep" {
				t.Errorf("state change of %q, want dep", d)
			}
		}
		if opened < 1 || back != 1 || closed != 1 {
			t.Errorf("state changes logged: open %d, half-open %d, closed %d; want >=1, 1, 1", opened, back, closed)
		}
		// The first call gave up: its give-up event (retries exhausted or
		// rejected by the breaker it opened) or at least one Warn+ event
		// naming its error.
		gaveUp := false
		h.mu.Lock()
		for _, r := range h.recs {
			if e, ok := r164Attr(r, "error"); ok && strings.Contains(e, "r164 boom") && r.Level >= slog.LevelInfo {
				gaveUp = true
			}
		}
		all := len(h.recs)
		h.mu.Unlock()
		if !gaveUp {
			t.Errorf("no Info+ record names the error of the calls that failed (%d records)", all)
		}
		nr := h.find("resilience " + resilience.EventNotRetried.String())
		if len(nr) != 1 || nr[0].Level != slog.LevelInfo {
			t.Errorf("not-retried records: %d, want 1 at Info", len(nr))
		}
	})
}

// r164PanicErr's Error panics with v.
type r164PanicErr struct{ v any }

func (e *r164PanicErr) Error() string { panic(e.v) }

type r164Self struct{}

func (e *r164Self) Error() string { panic(e) }

type r164Str struct{}

func (r164Str) String() string { panic("String panics too") }

type r164Nil struct{ s *string }

func (e *r164Nil) Error() string { return *e.s }

// (4) hostile error values: no panic, the event is logged.
func TestReview164HostileErrors(t *testing.T) {
	var nilp *r164Nil
	errs := map[string]error{
		"panics":         &r164PanicErr{v: "bad"},
		"panicsErr":      &r164PanicErr{v: &r164PanicErr{v: &r164PanicErr{v: 1}}},
		"panicsSelf":     &r164Self{},
		"panicsStringer": &r164PanicErr{v: r164Str{}},
		"nilPtr":         nilp,
		"nilField":       &r164Nil{},
		"panicsNil":      &r164PanicErr{v: nil},
	}
	for name, err := range errs {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slogevents.New(slog.New(slog.NewTextHandler(&buf, nil)))
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("OnEvent panicked: %v", r)
					}
				}()
				l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "dep", Attempt: 3, Err: err})
			}()
			if n := strings.Count(buf.String(), "\n"); n != 1 {
				t.Errorf("logged %d lines, want 1: %q", n, buf.String())
			}
		})
	}
}

// (4) names and errors with newlines, quotes and ANSI escapes stay in one
// line of text (or one JSON object).
func TestReview164NewlinesStayInOneRecord(t *testing.T) {
	name := "dep\nlevel=ERROR msg=\"forged\"\r\n\x1b[31m"
	err := errors.New("boom\nlevel=ERROR msg=forged")
	for _, json := range []bool{false, true} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if json {
			h = slog.NewJSONHandler(&buf, nil)
		}
		l := slogevents.New(slog.New(h))
		l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: name, Attempt: 3, Err: err})
		l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: name, From: resilience.StateClosed, To: resilience.StateOpen})
		if n := strings.Count(buf.String(), "\n"); n != 2 {
			t.Errorf("json=%v: %d lines for 2 events: %q", json, n, buf.String())
		}
		if strings.Contains(buf.String(), "\x1b") && !json {
			t.Logf("raw ESC byte passes into text output: %q", buf.String())
		}
	}
}

// (4) huge error text: logged once, and OnEvent does not take long.
func TestReview164HugeError(t *testing.T) {
	huge := errors.New(strings.Repeat("x", 8<<20))
	h := &r164Rec{}
	l := slogevents.New(slog.New(h))
	start := time.Now()
	l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: "dep", Err: huge})
	if d := time.Since(start); d > time.Second {
		t.Errorf("OnEvent took %v", d)
	}
	if len(h.find("resilience "+resilience.EventRetriesExhausted.String())) != 1 {
		t.Error("huge error not logged")
	}
}

// (4) concurrency: OnEvent and Wants from many goroutines while the level
// changes (run with -race).
func TestReview164Concurrent(t *testing.T) {
	var lv slog.LevelVar
	h := &r164Rec{level: &lv}
	l := slogevents.New(slog.New(h))
	var zero slogevents.Listener
	var nilL *slogevents.Listener
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g == 0 && i%10 == 0 {
					lv.Set(slog.Level((i/10%3)*4 - 4))
				}
				k := resilience.EventKind(1 + i%16)
				_ = l.Wants(k)
				l.OnEvent(resilience.Event{Kind: k, Name: "dep", Attempt: i, Err: errR164, To: resilience.StateOpen})
				_ = zero.Wants(k)
				_ = nilL.Wants(k)
			}
		}()
	}
	wg.Wait()
}

// r164Panicky's Enabled or Handle panics.
type r164Panicky struct{ inEnabled bool }

func (h r164Panicky) Enabled(context.Context, slog.Level) bool {
	if h.inEnabled {
		panic("handler Enabled panics")
	}
	return true
}
func (h r164Panicky) Handle(context.Context, slog.Record) error { panic("handler Handle panics") }
func (h r164Panicky) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h r164Panicky) WithGroup(string) slog.Handler             { return h }

// (4) a listener whose handler panics never fails a call: the call and
// the breaker see the outcome they would have seen (resilience.Listener's
// doc). Also with the zero Listener, which logs to slog.Default(), when
// the default logger is that handler (the panic is then reported to the
// same logger).
func TestReview164PanickingHandlerNeverFailsCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		zero      bool
		inEnabled bool
	}{{"own/Handle", false, false}, {"own/Enabled", false, true}, {"default/Handle", true, false}, {"default/Enabled", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := r164Panicky{inEnabled: tc.inEnabled}
			var l *slogevents.Listener
			if tc.zero {
				old, oldW, oldF := slog.Default(), log.Writer(), log.Flags()
				slog.SetDefault(slog.New(h))
				t.Cleanup(func() { // slog.SetDefault(old) alone leaves log's output on h
					slog.SetDefault(old)
					log.SetOutput(oldW)
					log.SetFlags(oldF)
				})
				l = &slogevents.Listener{}
			} else {
				l = slogevents.New(slog.New(h))
			}
			b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
			p := pipeline.New(pipeline.WithName("dep"), pipeline.WithBreaker(b), pipeline.WithListener(l),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))))
			var err error
			var v int
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("a failing call panicked through the listener: %v", r)
					}
				}()
				v, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errR164 })
			}()
			if !errors.Is(err, errR164) || v != 0 {
				t.Errorf("call got %v, want its own error", err)
			}
			if b.State() != resilience.StateOpen {
				t.Errorf("breaker %v, want open", b.State())
			}
			// the breaker must still work (its lock not left held)
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { _ = recover() }()
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatal("the pipeline hangs after the listener panicked (breaker lock held?)")
			}
		})
	}
}

// (4) the logger's level raised after the pipeline was built (a
// slog.LevelVar): the required events are logged from then on.
func TestReview164LevelRaisedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lv slog.LevelVar
		lv.Set(slog.LevelError)
		h := &r164Rec{level: &lv}
		l := slogevents.New(slog.New(h))
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p := pipeline.New(pipeline.WithName("dep"), pipeline.WithBreaker(b), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		lv.Set(slog.LevelInfo)
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errR164 })
		time.Sleep(2 * time.Second)
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		tos := map[string]bool{}
		for _, r := range h.find("resilience " + resilience.EventStateChange.String()) {
			to, _ := r164Attr(r, "to")
			tos[to] = true
		}
		if !tos["open"] || !tos["half-open"] || !tos["closed"] {
			t.Errorf("state changes logged after the level was raised: %v", tos)
		}
	})
}
