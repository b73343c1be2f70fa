package dashboard

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/registry"
)

// The cached event is stamped when its encoding ends, not when its snapshot
// was taken: it is sent for a quarter interval after that, so its state can
// be older than a quarter by the time the snapshot and the encoding took.
func TestReview46_EventStampedAfterEncoding(t *testing.T) {
	reg := registry.New()
	var bs []*breaker.Breaker
	for i := 0; i < 3000; i++ {
		b := breaker.New(fmt.Sprintf("b-%05d-%s", i, strings.Repeat("y", 100)))
		_ = reg.AddBreaker(b)
		bs = append(bs, b)
	}
	defer runtime.KeepAlive(bs)
	h := New(reg, Interval(40*time.Millisecond))
	b, err := h.state()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		At time.Time `json:"at"`
	}
	if err := json.Unmarshal(b[len("data: "):], &v); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	stamped := h.eventAt
	h.mu.Unlock()
	lag := stamped.Sub(v.At)
	t.Logf("%d bytes; the snapshot was taken at %v, the event stamped %v later; served until %v after the snapshot (quarter %v)",
		len(b), v.At.Format("15:04:05.000"), lag, lag+h.cfg.interval/4, h.cfg.interval/4)
	if lag > h.cfg.interval/4 {
		t.Errorf("an event can be sent %v after its snapshot, more than twice the quarter interval", lag+h.cfg.interval/4)
	}
}

// Streams that find the event stale at once wait for one encoding and
// take it, even when encoding takes longer than a quarter interval (500
// breakers, 1 ms interval): before, each waiter found the new event
// already stale and encoded its own, one after the other, and a page of
// 200 got no event in a second under the race detector.
func TestStreamsStaleAtOnceShareOneEncoding(t *testing.T) {
	reg := registry.New()
	var bs []*breaker.Breaker
	for i := range 500 {
		b := breaker.New(fmt.Sprintf("b-%05d-%s", i, strings.Repeat("y", 50)))
		_ = reg.AddBreaker(b)
		bs = append(bs, b)
	}
	defer runtime.KeepAlive(bs)
	h := New(reg, Interval(time.Millisecond))
	start := make(chan struct{})
	done := make(chan struct{})
	for range 20 {
		go func() {
			<-start
			_, _ = h.state()
			done <- struct{}{}
		}()
	}
	close(start)
	for range 20 {
		<-done
	}
	h.mu.Lock()
	gen := h.gen
	h.mu.Unlock()
	if gen > 3 { // one, and one or two more for goroutines that came after it was sent
		t.Errorf("20 streams stale at once made %d encodings", gen)
	}
}
