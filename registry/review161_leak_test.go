package registry_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review161Settle(cond func() bool) bool {
	for i := 0; i < 50; i++ {
		runtime.GC()
		if cond() {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// Pipelines dropped while their breaker lives on (a long-lived breaker,
// pipelines made per request or per tenant on it) are unregistered once
// collected: the breaker must not hold them.
func TestReview161_DroppedPipelinesOnLiveBreaker(t *testing.T) {
	reg := registry.New()
	b := breaker.New("live161")
	for i := range 50 {
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(fmt.Sprintf("p161-%d", i)), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0)))))
		if err != nil {
			t.Fatal(err)
		}
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	}
	ok := review161Settle(func() bool { _, ps := reg.Names(); return len(ps) == 0 })
	if _, ps := reg.Names(); !ok {
		t.Errorf("%d dropped pipelines still registered: %v", len(ps), ps[:min(3, len(ps))])
	}
	if bs, _ := reg.Names(); len(bs) != 1 {
		t.Errorf("breakers %v, want the live one", bs)
	}
	runtime.KeepAlive(b)
}

// A breaker dropped with its pipeline frees its name: the same name can
// be registered again.
func TestReview161_NameFreedAfterCollect(t *testing.T) {
	reg := registry.New()
	func() {
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("again161"))))
		if err != nil {
			t.Fatal(err)
		}
		_ = p
	}()
	ok := review161Settle(func() bool {
		_, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("again161"))))
		return err == nil
	})
	if !ok {
		t.Errorf("name not freed after the pipeline and its breaker were dropped")
	}
}

// Hostile names: huge, control bytes, markup. Registered and listed as
// given, not truncated, not merged; non-UTF-8 refused.
func TestReview161_HostileNames(t *testing.T) {
	reg := registry.New()
	huge := string(make([]byte, 1<<20))
	names := []string{huge, "a\u2028b", "</script><script>alert(1)</script>", "\x00", "a b", "A B"}
	keep := []*pipeline.Pipeline{}
	for _, n := range names {
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName(n)))
		if err != nil {
			t.Fatalf("%.20q: %v", n, err)
		}
		keep = append(keep, p)
	}
	if _, err := reg.AddPipeline(pipeline.New(pipeline.WithName("\xff"))); err == nil {
		t.Errorf("non-UTF-8 name accepted")
	}
	if err := reg.AddBreaker(breaker.New("\xfe")); err == nil {
		t.Errorf("non-UTF-8 breaker accepted")
	}
	_, ps := reg.Names()
	if len(ps) != len(names) {
		t.Errorf("%d pipelines listed, want %d", len(ps), len(names))
	}
	_ = resilience.ClassSuccess
	runtime.KeepAlive(keep)
}
