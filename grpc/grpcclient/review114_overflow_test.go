package grpcclient_test

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r114Names struct {
	mu    sync.Mutex
	names map[string]int
}

func (l *r114Names) OnEvent(e resilience.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]int{}
	}
	l.names[e.Name]++
}

// Methods past MaxBreakers go through the pipeline without a breaker: a
// failing one must not fail the others, and their events must still name
// the dependency (the pipeline's name, as before the change).
func TestReview114_GRPCOverflowEventsNamed(t *testing.T) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.Unavailable})
	names := &r114Names{}
	p := pipeline.New(pipeline.WithBreaker(breaker.New("orders", breaker.ConsecutiveFailures(1))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))),
		pipeline.WithListener(names))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.MaxBreakers(1),
		grpcclient.BreakerPerMethod(func(k string) *breaker.Breaker { return breaker.New(k, breaker.ConsecutiveFailures(1)) }),
		grpcclient.RetryMethods(grpctest.Create))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := grpctest.NewClient(cc)
	if _, err := c.Get(t.Context(), "x"); err != nil { // takes the one slot
		t.Fatal(err)
	}
	for range 3 {
		c.Create(t.Context(), "y") // past the bound, failing
		if _, err := c.Get(t.Context(), "x"); err != nil {
			t.Fatalf("Get failed: %v", err)
		}
	}
	names.mu.Lock()
	defer names.mu.Unlock()
	t.Logf("names: %v", names.names)
	if n := names.names[""]; n > 0 {
		t.Errorf("%d events with no dependency name (calls past MaxBreakers); the pipeline's is %q", n, p.Stages().Name)
	}
}
