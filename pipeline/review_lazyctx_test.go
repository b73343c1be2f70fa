package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// Concurrent end, Done, Err and Cause on a lazy context (with and
// without a lazy parent, fresh or not): once Err says non-nil, Done is
// closed; Err never goes back to nil; at the end Err, Cause and Done
// agree.
func TestEdges28LazyCtxConcurrentEndDoneErr(t *testing.T) {
	for i := 0; i < 3000; i++ {
		parent := new(lazyCtx)
		parent.set(context.Background(), monotime.Now(), time.Hour, false)
		var c *lazyCtx
		switch i % 3 {
		case 0:
			c = lazyAfter(parent, time.Hour, ErrAttemptTimeout)
		case 1:
			c = &lazyCtx{Context: parent} // no deadline
		default:
			c = parent
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		wg.Add(4)
		go func() { defer wg.Done(); c.end() }()
		go func() { defer wg.Done(); parent.end() }()
		go func() {
			defer wg.Done()
			if c.Err() != nil {
				select {
				case <-c.Done():
				default:
					errs <- "Err non-nil while Done open"
				}
			}
		}()
		go func() {
			defer wg.Done()
			ch := c.Done()
			e1 := c.Err()
			if e1 != nil && c.Err() == nil {
				errs <- "Err went back to nil"
			}
			_ = ch
		}()
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(i, e)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal(i, "Done open after end")
		}
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
			t.Fatalf("%d: Err %v, Cause %v after end", i, c.Err(), context.Cause(c))
		}
	}
}
