package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"
)

type rk struct{}

// Concurrent use: Err, Done, Value, Cause, derived contexts, end and the
// parent's cancellation racing; after it all, every derived context is
// done and Err and Done agree.
func TestLazyConcurrent(t *testing.T) {
	for i := range 300 {
		parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), rk{}, 1))
		lc := newLazyCtx(parent, time.Now().Add(time.Duration(i%5)*50*time.Microsecond), ErrAttemptTimeout)
		var wg sync.WaitGroup
		derived := make([]context.Context, 8)
		for g := range 8 {
			wg.Go(func() {
				switch g % 4 {
				case 0:
					d, c := context.WithCancel(lc)
					defer c()
					derived[g] = d
					<-d.Done()
				case 1:
					if lc.Err() != nil {
						select {
						case <-lc.Done():
						default:
							t.Error("Err set, Done open")
						}
					}
					derived[g] = lc
				case 2:
					if lc.Value(rk{}) != 1 {
						t.Error("value lost")
					}
					stop := context.AfterFunc(lc, func() {})
					defer stop()
					derived[g] = context.WithoutCancel(lc)
					_ = context.Cause(lc)
				case 3:
					if g == 3 {
						lc.end()
					} else {
						cancelParent(errX)
					}
					derived[g] = lc
				}
			})
		}
		wg.Wait()
		if lc.Err() == nil {
			t.Fatal("not ended")
		}
		<-lc.Done()
		cancelParent(nil)
	}
}
