package redistest_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// review170: Restart "starts the server again ... so that it reloads its
// snapshot": once it returns, the server is ready, by the doc's "it is
// ready once its own process listens". Redis listens before it loads its
// RDB, and answers LOADING until then: a test that reads its data right
// after Restart (with a client that does not retry LOADING, as the
// store's own clients with MaxRetries -1, or a raw RESP client) fails.
// key-load-delay stands for a larger dataset (5000 keys at 400 µs: 2 s);
// loading-process-events-interval-bytes for one over 2 MB, whose loading
// answers LOADING (a smaller one accepts no connection until loaded).
func TestReview170RestartReadyWhileLoading(t *testing.T) {
	t0 := time.Now()
	s := redistest.Start(t, "--key-load-delay", "400", "--loading-process-events-interval-bytes", "1024")
	t.Logf("Start %v", time.Since(t0))
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	pipe := c.Pipeline()
	for i := range 5000 {
		pipe.Set(ctx, fmt.Sprintf("k%d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("sets %v", time.Since(t0))
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("save %v", time.Since(t0))
	s.Kill()
	t.Logf("kill %v", time.Since(t0))
	start := time.Now()
	s.Restart()
	t.Logf("Restart took %v", time.Since(start))
	c2 := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c2.Close()
	gctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	v, err := c2.Get(gctx, "k4999").Result()
	t.Logf("get %v %v %v", time.Since(start), v, err)
	if err != nil || v != "v" {
		t.Fatalf("Restart returned after %v, yet the server is not ready: %q %v", time.Since(start), v, err)
	}
}

// fatalTB records a Fatal and ends its goroutine.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Restart on a port another process took must fail the test, not pass
// for the other process's listener.
func TestReview170RestartPortTaken(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan bool)
	var l net.Listener
	go func() {
		defer close(done)
		s := redistest.Start(f)
		s.Kill()
		var err error
		if l, err = net.Listen("tcp", s.Addr()); err != nil {
			f.msg = "skip"
			return
		}
		s.Restart()
	}()
	select {
	case <-done:
	case <-time.After(25 * time.Second):
		t.Fatal("Restart hung")
	}
	if l != nil {
		l.Close()
	}
	if f.msg == "skip" {
		t.Skip("port not free after the kill")
	}
	if f.msg == "" {
		t.Fatal("Restart on a port another process holds passed")
	}
	t.Log(f.msg)
}
