package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Race 1 hedges (both fail), race 2 does not: no spare left; then race 1
// alone and race 2 hedged with its loser still running: no spare left
// either, and the spare a later call leaves is clean.
func TestZRevRetryMixedRaces(t *testing.T) {
	p := New(WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))),
		WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))))
	errX := errors.New("x")
	var mu sync.Mutex
	n := 0
	res, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch k {
		case 1:
			time.Sleep(10 * time.Millisecond)
			return 0, errX
		case 2:
			return 0, errX
		}
		return 7, nil
	})
	if err != nil || res != 7 || spareOf[int](p) != nil {
		t.Fatalf("got %d, %v, spare %v", res, err, spareOf[int](p) != nil)
	}
	release := make(chan struct{})
	hedged := make(chan struct{}) // race 2's hedge runs: on a loaded machine its timer may come late
	var loser sync.WaitGroup
	n = 0
	loser.Add(1)
	res, err = Do(context.Background(), p, func(ctx context.Context) (int, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch k {
		case 1:
			return 0, errX
		case 2: // race 2's first: slow, wins after its hedge is out
			select {
			case <-hedged:
			case <-time.After(10 * time.Second):
			}
			return 8, nil
		}
		defer loser.Done()
		close(hedged)
		<-release
		return 9, nil
	})
	if err != nil || res != 8 {
		t.Fatalf("got %d, %v", res, err)
	}
	select {
	case <-hedged:
	default:
		t.Fatal("race 2 sent no hedge")
	}
	if spareOf[int](p) != nil {
		t.Error("spare left while race 2's hedge runs")
	}
	close(release)
	loser.Wait()
}
