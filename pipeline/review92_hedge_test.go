package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r92Listener struct {
	mu     sync.Mutex
	counts map[resilience.EventKind]int
}

func (l *r92Listener) OnEvent(e resilience.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[resilience.EventKind]int{}
	}
	l.counts[e.Kind]++
}

func (l *r92Listener) n(k resilience.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[k]
}

// Hedges fire at their delay, one each delay, up to MaxExtra; the first
// success wins and the losers' contexts are canceled at once.
func TestReview92_HedgeTimingAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		start := time.Now()
		var mu sync.Mutex
		var starts []time.Duration
		var ctxs []context.Context
		var n atomic.Int32
		type big struct {
			A int
			B [40]byte
			P *int
		}
		x := 7
		res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (big, error) {
			i := n.Add(1)
			mu.Lock()
			starts = append(starts, time.Since(start))
			ctxs = append(ctxs, ctx)
			mu.Unlock()
			if i == 3 { // the second hedge answers after 50 ms
				time.Sleep(50 * time.Millisecond)
				return big{A: 3, P: &x}, nil
			}
			<-ctx.Done()
			return big{A: int(i)}, ctx.Err()
		})
		if err != nil || res.A != 3 || res.P != &x {
			t.Fatalf("res %+v err %v", res, err)
		}
		took := time.Since(start)
		if took != 250*time.Millisecond {
			t.Errorf("took %v, want 250ms", took)
		}
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
		if len(starts) != 3 {
			t.Fatalf("starts %v (the third hedge at 300 ms must not be sent: the race is won at 250)", starts)
		}
		for i, s := range starts {
			if s != want[i] {
				t.Errorf("attempt %d at %v, want %v", i, s, want[i])
			}
		}
		for i, c := range ctxs {
			if i != 2 && c.Err() == nil {
				t.Errorf("loser %d not canceled", i)
			}
		}
		time.Sleep(time.Second)
		if n.Load() != 3 {
			t.Errorf("attempts after the call: %d", n.Load())
		}
	})
}

// At most MaxExtra hedges, even when all attempts hang; the caller's
// deadline ends them all.
func TestReview92_HedgeMaxExtra(t *testing.T) {
	for _, extra := range []int{1, 2, 5} {
		synctest.Test(t, func(t *testing.T) {
			p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(extra), hedge.MaxShare(1))))
			var n atomic.Int32
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				n.Add(1)
				<-ctx.Done()
				return 0, ctx.Err()
			})
			if err == nil {
				t.Fatal("no error")
			}
			want := int32(extra + 1)
			if extra+1 > 2 { // budget: share 1 of 1 call, plus one: 2 hedges
				want = 3
			}
			if n.Load() > int32(extra+1) {
				t.Errorf("extra %d: %d attempts", extra, n.Load())
			}
			t.Logf("extra %d: %d attempts (budget-bound %d)", extra, n.Load(), want)
			if !pipeline.Hedged(err) {
				t.Errorf("not marked hedged: %v", err)
			}
		})
	}
}

// No hedge is sent while the breaker is open: another call opens it
// during the delay.
func TestReview92_NoHedgeWhileOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r92", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int32
		done := make(chan error)
		go func() {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				n.Add(1)
				time.Sleep(300 * time.Millisecond)
				return 1, nil
			})
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, errors.New("503") })
		if b.State() != resilience.StateOpen {
			t.Fatalf("breaker %v", b.State())
		}
		err := <-done
		if n.Load() != 1 {
			t.Errorf("hedge sent with the breaker open: %d attempts", n.Load())
		}
		_ = err
	})
}

// Results of every type: the winner's value, pointer identity and zero
// values, and a non-retried error carrying a value, are returned as they
// are; Discard gets every other.
func TestReview92_ResultTypes(t *testing.T) {
	type valErr struct{ error }
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
		// pointer: hedge wins
		v := new(int)
		var discarded []*int
		var dmu sync.Mutex
		var n atomic.Int32
		got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (*int, error) {
			if n.Add(1) == 2 {
				return v, nil
			}
			<-ctx.Done()
			return new(int), ctx.Err()
		}, pipeline.Discard(func(x *int) { dmu.Lock(); discarded = append(discarded, x); dmu.Unlock() }))
		if err != nil || got != v {
			t.Fatalf("pointer: %p %v", got, err)
		}
		time.Sleep(time.Second)
		dmu.Lock()
		for _, d := range discarded {
			if d == v {
				t.Errorf("winner discarded")
			}
		}
		if len(discarded) != 1 {
			t.Errorf("discarded %d, want 1 (the first attempt)", len(discarded))
		}
		dmu.Unlock()

		// zero value success by the first attempt after the hedge is out
		n.Store(0)
		z, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (struct{ A, B int }, error) {
			if n.Add(1) == 1 {
				time.Sleep(15 * time.Millisecond)
				return struct{ A, B int }{}, nil
			}
			<-ctx.Done()
			return struct{ A, B int }{1, 2}, ctx.Err()
		})
		if err != nil || z.A != 0 || z.B != 0 {
			t.Fatalf("zero: %v %v", z, err)
		}

		// a permanent error with a value, from a hedge, while the first hangs
		n.Store(0)
		perm := resilience.Permanent(valErr{errors.New("400")})
		s, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			if n.Add(1) == 2 {
				return "body of 400", perm
			}
			select {
			case <-time.After(40 * time.Millisecond):
				return "late", errors.New("503")
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		t.Logf("permanent from hedge: %q %v (attempts %d)", s, err, n.Load())
		if !errors.Is(err, perm) && !errors.As(err, new(valErr)) {
			t.Errorf("lost the permanent error: %v", err)
		}
	})
}

// A hedge that panics or calls Goexit while the first attempt runs: the
// caller sees the panic (or Goexit); every limit slot comes back.
func TestReview92_HedgePanicGoexit(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		synctest.Test(t, func(t *testing.T) {
			lim := limit.NewFixed(10)
			p := pipeline.New(pipeline.WithLimit(lim),
				pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
			var n atomic.Int32
			var firstCtx context.Context
			panicked := make(chan any, 1)
			go func() {
				returned := false
				defer func() {
					if !returned {
						panicked <- fmt.Sprint(recover())
					}
				}()
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 2 {
						if mode == "panic" {
							panic("hedge boom")
						}
						runtime.Goexit()
					}
					if firstCtx == nil {
						firstCtx = ctx
					}
					<-ctx.Done()
					return 0, ctx.Err()
				})
				returned = true
				panicked <- "returned"
			}()
			got := <-panicked
			t.Logf("%s: %v, attempts %d", mode, got, n.Load())
			if mode == "panic" && got != "hedge boom" {
				t.Errorf("panic not carried: %v", got)
			}
			if mode == "goexit" && got != "<nil>" {
				t.Errorf("goexit: %v", got)
			}
			synctest.Wait()
			time.Sleep(time.Second)
			if lim.InFlight() != 0 {
				t.Errorf("slots held: %d", lim.InFlight())
			}
		})
	}
}

// The caller cancels mid-race: every attempt's context ends, the call
// returns at once with the cancellation, slots come back.
func TestReview92_CallerCancelsMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewAIMD(limit.Initial(10), limit.MaxWaiting(10))
		b := breaker.New("r92c", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		ctx, cancel := context.WithCancel(context.Background())
		var ctxs []context.Context
		var mu sync.Mutex
		time.AfterFunc(25*time.Millisecond, cancel)
		start := time.Now()
		_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			mu.Lock()
			ctxs = append(ctxs, ctx)
			mu.Unlock()
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if time.Since(start) != 25*time.Millisecond || !errors.Is(err, context.Canceled) {
			t.Errorf("err %v after %v", err, time.Since(start))
		}
		synctest.Wait()
		if len(ctxs) != 3 {
			t.Errorf("attempts %d", len(ctxs))
		}
		for i, c := range ctxs {
			if c.Err() == nil {
				t.Errorf("attempt %d ctx alive", i)
			}
		}
		if lim.InFlight() != 0 || lim.Limit() != 10 {
			t.Errorf("limit inflight %d limit %d", lim.InFlight(), lim.Limit())
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v", b.State())
		}
	})
}

// Limit refusal: does not count against the breaker, not retried, clear
// error; a hedge refused by a full limit does not replace the first's answer.
func TestReview92_LimitRefusalHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewFixed(1)
		b := breaker.New("r92l", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
		l := &r92Listener{}
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithBreaker(b), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		release := make(chan struct{})
		var ops atomic.Int32
		done := make(chan error)
		go func() {
			v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				ops.Add(1)
				<-release
				return 42, nil
			})
			if v != 42 {
				err = fmt.Errorf("v %d: %w", v, err)
			}
			done <- err
		}()
		synctest.Wait()
		time.Sleep(20 * time.Millisecond) // the hedge is due: refused by the limit
		for range 20 {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				ops.Add(1)
				return 0, nil
			})
			var re *retrypolicy.Error
			if !errors.Is(err, limit.ErrLimited) {
				t.Fatalf("err %v", err)
			}
			if errors.As(err, &re) && re.Attempts > 1 {
				t.Errorf("limited retried: %v", re.Attempts)
			}
			if pipeline.Hedged(err) {
				t.Errorf("refused call said hedged")
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Errorf("first: %v", err)
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker opened by refusals: %v", b.State())
		}
		if ops.Load() != 1 {
			t.Errorf("ops %d", ops.Load())
		}
		if lim.InFlight() != 0 {
			t.Errorf("inflight %d", lim.InFlight())
		}
		t.Logf("EventLimited %d EventHedged %d", l.n(resilience.EventLimited), l.n(resilience.EventHedged))
	})
}

// Stress: many callers through hedging and a queued limit, operations that
// succeed, hang until canceled, ignore their context, panic or Goexit;
// callers that cancel. The limit is never exceeded, every slot comes back,
// every non-nil result not returned is discarded exactly once, and a
// call's success is never lost.
func TestReview92_StressHedgeLimit(t *testing.T) {
	defer goleakVerify92(t)
	const lim = 6
	l := limit.NewFixed(lim, limit.MaxWaiting(20))
	p := pipeline.New(pipeline.WithLimit(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(200*time.Microsecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
	var cur, peak atomic.Int64
	var made, returned, discarded, twice atomic.Int64
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				k := (g*7 + i*13) % 17
				ctx, cancel := context.WithCancel(context.Background())
				if k == 3 {
					time.AfterFunc(300*time.Microsecond, cancel)
				}
				var n atomic.Int32
				func() {
					defer func() { recover() }()
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { recover() }()
						v, err := pipeline.Do(ctx, p, func(ctx context.Context) (*atomic.Int32, error) {
							c := cur.Add(1)
							defer cur.Add(-1)
							for {
								pk := peak.Load()
								if c <= pk || peak.CompareAndSwap(pk, c) {
									break
								}
							}
							a := n.Add(1)
							made.Add(1)
							res := new(atomic.Int32)
							switch {
							case k == 5 && a == 2:
								panic("x")
							case k == 6 && a == 2:
								runtime.Goexit()
							case k == 7:
								time.Sleep(time.Millisecond) // ignores ctx
								return res, nil
							case a == 1 && k%2 == 0:
								select {
								case <-ctx.Done():
									return res, ctx.Err()
								case <-time.After(2 * time.Millisecond):
									return res, nil
								}
							case k == 9:
								return res, errors.New("503")
							}
							time.Sleep(100 * time.Microsecond)
							return res, nil
						}, pipeline.Discard(func(x *atomic.Int32) {
							if x == nil {
								return
							}
							discarded.Add(1)
							if x.Add(1) > 1 {
								twice.Add(1)
							}
						}))
						if v != nil {
							returned.Add(1)
							if v.Add(1) > 1 {
								twice.Add(1)
							}
						}
						_ = err
					}()
					<-done
				}()
				cancel()
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for l.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if peak.Load() > lim {
		t.Errorf("peak in flight %d > %d", peak.Load(), lim)
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Errorf("limit after: %d in flight, %d waiting", l.InFlight(), l.Waiting())
	}
	if twice.Load() != 0 {
		t.Errorf("a result returned/discarded twice: %d", twice.Load())
	}
	t.Logf("made %d returned %d discarded %d (others: retried errors, panics)", made.Load(), returned.Load(), discarded.Load())
}

func goleakVerify92(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n < 20 || time.Now().After(deadline) {
			if n >= 20 {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines left: %d\n%s", n, buf[:runtime.Stack(buf, true)])
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Hedges do not draw on the retry quota: after many hedged calls, the
// quota's allowance is what the same calls leave without hedging.
func TestReview92_HedgesSpareRetryQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := func(hedged bool) int {
			q := retrypolicy.NewQuota(0.1, 0, time.Second)
			opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithQuota(q)))}
			if hedged {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
			}
			p := pipeline.New(opts...)
			for range 50 {
				var n atomic.Int32
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						select {
						case <-ctx.Done():
						case <-time.After(30 * time.Millisecond):
						}
						return 0, nil
					}
					return 1, nil
				})
			}
			return q.Available()
		}
		a, b := run(false), run(true)
		if a != b {
			t.Errorf("quota available: %d without hedges, %d with", a, b)
		}
		t.Logf("available %d %d", a, b)
	})
}

// The hedging delay starts as the first attempt is sent, not while it
// waits in the limit's queue.
func TestReview92_DelayFromSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(5))
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxShare(1))))
		tk, _ := l.Acquire(context.Background())
		time.AfterFunc(500*time.Millisecond, func() { l.Release(tk, nil) })
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(150 * time.Millisecond):
			}
			return 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// the hedge at 600 ms is refused: the limit's one slot is the first's
		t.Logf("attempts at %v", at)
		if len(at) != 1 || at[0] != 500*time.Millisecond {
			t.Errorf("attempts at %v", at)
		}
		if l.InFlight() != 0 {
			t.Errorf("inflight %d", l.InFlight())
		}
	})
}

// A hedge refused by the limit is not a hedge sent: the first attempt's
// failure is not said to be Hedged.
func TestReview92_RefusedHedgeNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			time.Sleep(50 * time.Millisecond)
			return 0, errors.New("503")
		})
		if err == nil || pipeline.Hedged(err) || errors.Is(err, limit.ErrLimited) {
			t.Errorf("err %v hedged %v", err, pipeline.Hedged(err))
		}
	})
}

// MaxExtra far past the outcomes channel's room: many hedges out, the
// last one wins; every goroutine ends (the bubble would deadlock).
func TestReview92_ManyHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(60), hedge.MaxShare(1))
		p := pipeline.New(pipeline.WithHedging(h))
		for range 100 {
			pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, nil })
		}
		var n atomic.Int32
		var ctxs sync.Map
		v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			i := n.Add(1)
			ctxs.Store(i, ctx)
			if i == 41 {
				return 41, nil
			}
			<-ctx.Done()
			return -1, ctx.Err()
		}, pipeline.Discard(func(int) {}))
		if v != 41 || err != nil {
			t.Fatalf("v %d err %v (attempts %d)", v, err, n.Load())
		}
		if n.Load() != 41 {
			t.Errorf("attempts %d", n.Load())
		}
		ctxs.Range(func(k, c any) bool {
			if k.(int32) != 41 && c.(context.Context).Err() == nil {
				t.Errorf("loser %v alive", k)
			}
			return true
		})
	})
}

// A loser that panics after its call was decided is logged: the process
// and the caller go on.
func TestReview92_LoserPanicsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(5)
		p := pipeline.New(pipeline.WithLimit(l), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var n atomic.Int32
		v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if n.Add(1) == 2 {
				<-ctx.Done()
				time.Sleep(5 * time.Millisecond)
				panic("late")
			}
			time.Sleep(15 * time.Millisecond)
			return 1, nil
		})
		if v != 1 || err != nil {
			t.Fatalf("%v %v", v, err)
		}
		time.Sleep(time.Second)
		if l.InFlight() != 0 {
			t.Errorf("inflight %d", l.InFlight())
		}
	})
}

// The caller's deadline teaches an adaptive limit nothing, whether the
// operation returns ctx.Err() or its own "i/o timeout" at the deadline,
// hedges included; the attempt timeout does teach it.
func TestReview92_AIMDLearnsOnlyOwnTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, hedged := range []bool{false, true} {
			l := limit.NewAIMD(limit.Initial(10), limit.Backoff(0.5))
			opts := []pipeline.Option{pipeline.WithLimit(l)}
			if hedged {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
			}
			p := pipeline.New(opts...)
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
						dl, _ := ctx.Deadline()
						if i%2 == 0 {
							time.Sleep(time.Until(dl))
							return 0, errors.New("read tcp: i/o timeout")
						}
						<-ctx.Done()
						return 0, ctx.Err()
					})
				}()
			}
			wg.Wait()
			if got := l.Limit(); got != 10 {
				t.Errorf("hedged %v: the caller's deadline moved the limit to %d", hedged, got)
			}
			if l.InFlight() != 0 {
				t.Errorf("inflight %d", l.InFlight())
			}
			p2 := pipeline.New(append(opts, pipeline.WithAttemptTimeout(20*time.Millisecond))...)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			pipeline.Do(ctx, p2, func(ctx context.Context) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			})
			cancel()
			if got := l.Limit(); got != 5 {
				t.Errorf("hedged %v: attempt timeout: limit %d, want 5", hedged, got)
			}
		}
	})
}

// The first attempt panics or calls Goexit with hedges out: the hedges are
// canceled, their slots come back, the caller sees the panic/Goexit, the
// breaker counts nothing.
func TestReview92_FirstPanicsWithHedgesOut(t *testing.T) {
	for _, mode := range []string{"panic", "goexit"} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewAIMD(limit.Initial(10))
			b := breaker.New("r92fp", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
			p := pipeline.New(pipeline.WithLimit(l), pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
			var hctx []context.Context
			var mu sync.Mutex
			var n atomic.Int32
			out := make(chan string, 1)
			go func() {
				ok := false
				defer func() {
					if !ok {
						out <- fmt.Sprint("unwound: ", recover())
					}
				}()
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if n.Add(1) == 1 {
						time.Sleep(35 * time.Millisecond)
						if mode == "panic" {
							panic("first")
						}
						runtime.Goexit()
					}
					mu.Lock()
					hctx = append(hctx, ctx)
					mu.Unlock()
					<-ctx.Done()
					return 0, ctx.Err()
				})
				ok = true
				out <- "returned"
			}()
			got := <-out
			synctest.Wait()
			t.Logf("%s: %s; hedges %d", mode, got, len(hctx))
			if len(hctx) != 2 { // the budget: 1 call, share 1: 2 hedges
				t.Errorf("hedges %d", len(hctx))
			}
			for i, c := range hctx {
				if c.Err() == nil {
					t.Errorf("hedge %d alive", i)
				}
			}
			if l.InFlight() != 0 || l.Limit() != 10 {
				t.Errorf("limit: inflight %d limit %d", l.InFlight(), l.Limit())
			}
			if b.State() != resilience.StateClosed {
				t.Errorf("breaker %v", b.State())
			}
		})
	}
}

// WithLimit's promise that a hedge never waits in a queue: does the pacer
// of WaitWhenOpen, the pipeline's own queued limit, queue a hedge of a
// call that waited, and does the call then wait for its hedge's turn after
// its first attempt failed?
func TestReview92_HedgeQueuesInPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r92p", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond),
			breaker.IgnoreIf(func(err error) bool { return err != nil && strings.Contains(err.Error(), "ignored") }))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(5*time.Second),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, errors.New("503") })
		if b.State() != resilience.StateOpen {
			t.Fatal("not open")
		}
		const calls = 60
		var wg sync.WaitGroup
		var hedges, firsts, late atomic.Int32
		var worst atomic.Int64
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				var failedAt time.Time
				var mu sync.Mutex
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if p.IsHedge(ctx) {
						hedges.Add(1)
						mu.Lock()
						if !failedAt.IsZero() {
							late.Add(1)
						}
						mu.Unlock()
						time.Sleep(time.Millisecond)
						return 0, errors.New("503 ignored")
					}
					if firsts.Add(1) == 1 {
						return 1, nil // the probe
					}
					time.Sleep(30 * time.Millisecond)
					mu.Lock()
					failedAt = time.Now()
					mu.Unlock()
					return 0, errors.New("503 ignored") // retried (no retry stage: returned), not counted by the breaker
				})
				mu.Lock()
				if !failedAt.IsZero() {
					if w := time.Since(failedAt); int64(w) > worst.Load() {
						worst.Store(int64(w))
					}
				}
				mu.Unlock()
				_ = start
			}()
		}
		wg.Wait()
		t.Logf("hedges sent %d (%d after their first attempt had failed), longest a call waited after its first attempt's answer: %v", hedges.Load(), late.Load(), time.Duration(worst.Load()))
		if worst.Load() > 0 {
			t.Errorf("a call was held %v past its answer", time.Duration(worst.Load()))
		}
	})
}

// A hedge's answer not to retry (a 409 of an idempotency key whose first
// request still runs: the code does not let it cut the first attempt short,
// as "the first may yet succeed") and then another hedge's success, which
// cuts the first: is the success returned, or the 409?
func TestReview92_SuccessAfterHedgePermanent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
		var n atomic.Int32
		var discarded []string
		var mu sync.Mutex
		v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
			switch n.Add(1) {
			case 1: // the first: would succeed at 100 ms
				select {
				case <-time.After(100 * time.Millisecond):
					return "first ok", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			case 2: // hedge 1, sent at 10 ms: 409 at 25 ms
				time.Sleep(15 * time.Millisecond)
				return "conflict body", resilience.Permanent(errors.New("409 conflict"))
			default: // hedge 2, sent at 20 ms: success at 30 ms
				time.Sleep(10 * time.Millisecond)
				return "hedge ok", nil
			}
		}, pipeline.Discard(func(s string) { mu.Lock(); discarded = append(discarded, s); mu.Unlock() }))
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		t.Logf("attempts %d: returned %q, %v; discarded %q", n.Load(), v, err, discarded)
		if err != nil {
			t.Errorf("a success was given, yet the call returned %v (discarded: %q)", err, discarded)
		}
	})
}

// A caller whose deadline ends or who cancels while its attempt waits in
// the limit's queue: the error says both (ErrLimited and the context's),
// the breaker counts nothing, with and without a retry stage.
func TestReview92_QueuedCallerEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, retry := range []bool{false, true} {
			l := limit.NewFixed(1, limit.MaxWaiting(10))
			b := breaker.New("r92q", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
			opts := []pipeline.Option{pipeline.WithLimit(l), pipeline.WithBreaker(b),
				pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1)))}
			if retry {
				opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
			}
			p := pipeline.New(opts...)
			tk, _ := l.Acquire(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 1, nil })
			cancel()
			if time.Since(start) != 50*time.Millisecond || !errors.Is(err, limit.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("retry %v deadline: %v after %v (limited %v, deadline %v)", retry, err, time.Since(start), errors.Is(err, limit.ErrLimited), errors.Is(err, context.DeadlineExceeded))
			}
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 1, nil })
			if !errors.Is(err, context.Canceled) {
				t.Errorf("retry %v cancel: %v", retry, err)
			}
			if b.State() != resilience.StateClosed {
				t.Errorf("retry %v: breaker %v", retry, b.State())
			}
			l.Release(tk, nil)
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Errorf("limit %d %d", l.InFlight(), l.Waiting())
			}
		}
	})
}
