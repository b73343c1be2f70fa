package safe

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// review168: LogPanic logs on a goroutine of its own, and waits.

type review168Handler struct {
	n      *atomic.Int64
	handle func()
}

func (h review168Handler) Enabled(context.Context, slog.Level) bool { return true }
func (h review168Handler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	if h.handle != nil {
		h.handle()
	}
	return nil
}
func (h review168Handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h review168Handler) WithGroup(string) slog.Handler      { return h }

func review168WithDefault(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

func TestReview168LogPanicNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int64
	review168WithDefault(t, review168Handler{n: &n})
	for range 100 {
		LogPanic("x", "k", 1)
	}
	if n.Load() != 100 {
		t.Fatalf("logged %d of 100", n.Load())
	}
}

func TestReview168LogPanicInBubble(t *testing.T) {
	var n atomic.Int64
	review168WithDefault(t, review168Handler{n: &n, handle: func() { time.Sleep(time.Second) }})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		LogPanic("x")
		if d := time.Since(start); d != time.Second {
			t.Fatalf("LogPanic returned after %v, not after the handler's 1 s", d)
		}
		LogPanic("y")
	})
	if n.Load() != 2 {
		t.Fatalf("logged %d of 2", n.Load())
	}
}

func TestReview168LogPanicHandlerPanicsOrGoexits(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int64
	mode := atomic.Int64{}
	review168WithDefault(t, review168Handler{n: &n, handle: func() {
		switch mode.Load() {
		case 0:
			panic("handler panics")
		case 1:
			runtime.Goexit()
		case 2:
			var m map[string]int
			m["x"] = 1 // a runtime error panic
		case 3:
			panic(review168PanicValue{}) // a value whose String panics
		}
	}})
	for m := range int64(4) {
		mode.Store(m)
		returned := make(chan bool, 1)
		go func() {
			defer func() { returned <- false }()
			LogPanic("x", "k", m)
			returned <- true
		}()
		if !<-returned {
			t.Fatalf("mode %d: the caller's goroutine did not go on after LogPanic", m)
		}
	}
	if n.Load() != 4 {
		t.Fatalf("handled %d of 4", n.Load())
	}
}

type review168PanicValue struct{}

func (review168PanicValue) String() string { panic("String panics") }

func TestReview168LogPanicConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var n atomic.Int64
	var mu sync.Mutex
	review168WithDefault(t, review168Handler{n: &n, handle: func() {
		mu.Lock()
		time.Sleep(100 * time.Microsecond)
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			for range 5 {
				LogPanic("x")
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("200 goroutines x 5 LogPanic did not finish within 5 s")
	}
	if n.Load() != 1000 {
		t.Fatalf("logged %d of 1000", n.Load())
	}
}

// A listener that panics in a bubble, through deliver: the call goes on.
func TestReview168ListenerPanicInBubble(t *testing.T) {
	var n atomic.Int64
	review168WithDefault(t, review168Handler{n: &n, handle: func() { runtime.Goexit() }})
	synctest.Test(t, func(t *testing.T) {
		l := New("x", review168PanickyListener{})
		went := false
		func() {
			l.Emit(review168Event())
			went = true
		}()
		if !went {
			t.Fatal("Emit did not return")
		}
	})
	if n.Load() != 1 {
		t.Fatalf("logged %d of 1", n.Load())
	}
}

// A handler that blocks forever: LogPanic blocks too (as before review167,
// when it logged on the caller's goroutine). Measured, not a promise: the
// caller is held as long as the handler.
func TestReview168LogPanicBlockingHandlerHoldsCaller(t *testing.T) {
	var n atomic.Int64
	release := make(chan struct{})
	review168WithDefault(t, review168Handler{n: &n, handle: func() { <-release }})
	returned := make(chan struct{})
	go func() { LogPanic("x"); close(returned) }()
	select {
	case <-returned:
		t.Fatal("LogPanic returned while its handler still blocked")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-returned
}

type review168PanickyListener struct{}

func (review168PanickyListener) OnEvent(resilience.Event) { panic("listener panics") }

func review168Event() resilience.Event {
	return resilience.Event{Kind: resilience.EventRetry}
}
