package pipeline_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A client that honours its context's deadline the way go-redis
// (ContextTimeoutEnabled), pgx's deadline reader and many drivers do: it
// sets the socket's read deadline to ctx.Deadline() and returns the
// socket's "i/o timeout". The caller's own deadline ended the attempt, so
// the adaptive limit must learn nothing from it (pipeline.WithLimit doc,
// limit package doc). The pipeline tells the caller's deadline by
// ctx.Err() after the operation returned, which the context's timer may
// not have set yet.
func TestReview57CallerDeadlineViaSocketDeadlineTeachesLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // never answers
				buf := make([]byte, 1)
				_, _ = c.Read(buf)
				c.Close()
			}()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	l := limit.NewAIMD(limit.Initial(100), limit.Max(100))
	p := pipeline.New(pipeline.WithLimit(l))
	op := func(ctx context.Context) (int, error) {
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetReadDeadline(dl)
		}
		buf := make([]byte, 1)
		_, err := conn.Read(buf)
		return 0, err // *net.OpError, "i/o timeout": transient
	}
	const n = 100
	decreases := 0
	for i := 0; i < n; i++ {
		before := l.Limit()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := pipeline.Do(ctx, p, op)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("call %d: %v", i, err)
		}
		cancel()
		if l.Limit() < before {
			decreases++
		}
	}
	// The harm: healthy calls, 10 at once, now refused.
	refused := make(chan error, 10)
	for i := 0; i < 10; i++ {
		go func() {
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				time.Sleep(20 * time.Millisecond)
				return 1, nil
			})
			refused <- err
		}()
	}
	nref := 0
	for i := 0; i < 10; i++ {
		if errors.Is(<-refused, limit.ErrLimited) {
			nref++
		}
	}
	t.Logf("then %d of 10 concurrent healthy calls refused with ErrLimited", nref)
	t.Logf("%d of %d calls ended by the caller's 10 ms deadline decreased the limit; limit now %d (from 100)", decreases, n, l.Limit())
	if decreases > 0 {
		t.Errorf("the caller's own deadline shrank the adaptive limit %d times (to %d): do no harm", decreases, l.Limit())
	}
}
