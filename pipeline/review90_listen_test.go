package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r90count struct {
	mu sync.Mutex
	n  map[resilience.EventKind]int
}

func (c *r90count) OnEvent(e resilience.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[resilience.EventKind]int{}
	}
	c.n[e.Kind]++
}

// One listener given to the breaker, to Listen twice and to two pipelines
// hears each state change once, and each rejection once.
func TestReview90ListenOnce(t *testing.T) {
	l := &r90count{}
	b := breaker.New("dep", breaker.WithListener(l), breaker.OpenTimeout(time.Hour))
	s1 := b.Listen(l)
	s2 := b.Listen(l)
	defer s1()
	defer s2()
	p1 := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	p2 := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	for i := 0; i < 5; i++ {
		_, _ = pipeline.Do(context.Background(), p1, func(context.Context) (int, error) { return 0, errors.New("x") })
	}
	_, err := pipeline.Do(context.Background(), p2, func(context.Context) (int, error) { return 0, nil })
	if !errors.Is(err, breaker.ErrOpen) || !breaker.IsRejection(err) {
		t.Fatalf("err %v", err)
	}
	var rej interface{ ResilienceClass() resilience.Class }
	if !errors.As(err, &rej) || rej.ResilienceClass() != resilience.ClassTerminal {
		t.Errorf("rejection class: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[resilience.EventStateChange] != 1 || l.n[resilience.EventRejected] != 1 {
		t.Errorf("heard %v", l.n)
	}
}
