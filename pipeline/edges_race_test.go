package pipeline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Once a hedge has won, no further hedge may be sent: "the first success
// wins and the others are canceled". Here the first attempt takes 100 ms
// to notice its cancellation (a blocking syscall, a library that ignores
// ctx); the race was won at 10 ms, yet a second hedge goes out at 20 ms.
func TestHedgeSentAfterRaceWon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		var hedges atomic.Int32
		res, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
			if p.IsHedge(ctx) {
				hedges.Add(1)
				return "hedge", nil
			}
			time.Sleep(100 * time.Millisecond) // ignores ctx
			return "first", ctx.Err()
		})
		if err != nil || res != "hedge" {
			t.Fatalf("got %q, %v; want the hedge's answer", res, err)
		}
		if n := hedges.Load(); n != 1 {
			t.Errorf("%d hedges sent; want 1: the race was won by the first hedge", n)
		}
	})
}

// A hedge that panics after the call has returned (the first attempt won)
// has no caller to go on in: its panic is logged, not lost; a hedge that
// lost without a panic logs nothing.
func TestLosingHedgesLatePanicIsLogged(t *testing.T) {
	for _, bug := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			logged := &lockedBuffer{}
			defer slog.SetDefault(slog.Default())
			slog.SetDefault(slog.New(slog.NewTextHandler(logged, nil)))
			p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
			_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					time.Sleep(50 * time.Millisecond)
					if bug {
						panic("hedge bug")
					}
					return 2, nil
				}
				time.Sleep(20 * time.Millisecond)
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if got := strings.Contains(logged.String(), "hedge bug"); got != bug {
				t.Errorf("a losing hedge that panicked after the call was decided: %v; logged: %v (%q)", bug, got, logged.String())
			}
		})
	}
}

// A first attempt that calls runtime.Goexit while a hedge runs: the
// hedge is canceled and no goroutine is left (synctest reports one).
func TestFirstGoexitWithHedgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		var wg sync.WaitGroup
		wg.Add(1)
		exited := false
		go func() {
			defer wg.Done()
			defer func() { exited = true }()
			Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				time.Sleep(20 * time.Millisecond)
				runtimeGoexit()
				return 0, nil
			})
			t.Error("Do returned after a Goexit")
		}()
		wg.Wait()
		if !exited {
			t.Error("no exit")
		}
	})
}

// A hedge that wins by calling runtime.Goexit: the caller goexits too.
func TestHedgeGoexitWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		done := make(chan bool)
		go func() {
			returned := false
			defer func() { done <- returned }()
			Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if p.IsHedge(ctx) {
					runtimeGoexit()
				}
				<-ctx.Done()
				return 0, ctx.Err()
			})
			returned = true
		}()
		if <-done {
			t.Error("Do returned; want the hedge's Goexit to go on in the caller")
		}
	})
}

// A caller that cancels mid-race, the hedge ignoring cancellation: the
// call returns at once with the cancellation.
func TestCallerCancelsMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(15*time.Millisecond, cancel)
		start := time.Now()
		_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
			if p.IsHedge(ctx) {
				time.Sleep(time.Second)
				return 0, errors.New("late")
			}
			<-ctx.Done()
			return 0, ctx.Err()
		})
		defer time.Sleep(2 * time.Second)
		if !errors.Is(err, context.Canceled) || time.Since(start) > 20*time.Millisecond {
			t.Errorf("err %v after %v", err, time.Since(start))
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for a log handler's goroutine and
// the test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
