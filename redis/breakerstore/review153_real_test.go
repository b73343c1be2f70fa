package breakerstore_test

// review153: on a real redis-server, several replicas in one process each
// with their own client; Redis frozen through an outage the dependency
// recovers from, then thawed; the dependency fails again just after the
// first replica's own probes (vouching). Promise: the fleet, closed on
// those probes, reopens within a couple of flush intervals.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestReview153RealFailAgainAfterVouch(t *testing.T) {
	for _, n := range []uint32{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { r153Real(t, n, 0) })
		// The dependency fails again once every replica ran its own probes.
		t.Run(fmt.Sprint(n, "/all"), func(t *testing.T) { r153Real(t, n, 30*time.Millisecond) })
	}
}

func r153Real(t *testing.T, n uint32, waitAll time.Duration) {
	srv := redistest.Start(t)
	const replicas = 3
	const every = 100 * time.Millisecond
	var failing atomic.Bool
	failing.Store(true)
	var flipped atomic.Int64 // unix ns when the dependency failed again
	var firstN atomic.Int64  // when a replica first ran its n own probes
	var thawed atomic.Bool
	bs := make([]*breaker.Breaker, replicas)
	halfSeen := make([]atomic.Bool, replicas)
	okAfter := make([]atomic.Int64, replicas)
	for i := range bs {
		i := i
		l := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.Name == "r153 (fleet)" && e.To == resilience.StateHalfOpen && thawed.Load() {
				halfSeen[i].Store(true)
			}
		})
		bs[i] = breaker.New("r153",
			breaker.Shared(breakerstore.New(srv.Client(), "r153:")),
			breaker.FlushInterval(every), breaker.OpenTimeout(300*time.Millisecond),
			breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
			breaker.HalfOpenRequests(n), breaker.WithListener(l))
	}
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	reader := bs[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refusedAfter atomic.Int64
	for i, b := range bs {
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					err := b.Execute(context.Background(), func(context.Context) error {
						if failing.Load() {
							return errors.New("down")
						}
						if halfSeen[i].Load() && okAfter[i].Add(1) >= int64(n) && flipped.Load() == 0 {
							firstN.CompareAndSwap(0, time.Now().UnixNano())
							all := true
							for j := range okAfter {
								all = all && okAfter[j].Load() >= int64(n)
							}
							if (all || time.Since(time.Unix(0, firstN.Load())) > waitAll) && flipped.CompareAndSwap(0, time.Now().UnixNano()) {
								failing.Store(true)
							}
						}
						return nil
					})
					if breaker.IsRejection(err) && flipped.Load() != 0 {
						refusedAfter.Add(1)
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
	}
	defer func() { close(stop); wg.Wait() }()
	read := func() resilience.State {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		st, err := reader.Fleet(ctx)
		if err != nil {
			return 255
		}
		return st.State
	}
	wait := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		end := time.Now().Add(d)
		for !ok() {
			if time.Now().After(end) {
				t.Fatalf("setup: %s not within %v", what, d)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("fleet open", 2*time.Second, func() bool { return read() == resilience.StateOpen })
	srv.Freeze()
	failing.Store(false)
	time.Sleep(900 * time.Millisecond)
	thawed.Store(true)
	srv.Thaw()
	wait("dependency failing again after a vouching replica's probes", 2*time.Second, func() bool { return flipped.Load() != 0 })
	flip := time.Unix(0, flipped.Load())
	// Watch the store: a close, then how long until it reopens.
	var closedAt, reopenAt time.Time
	var trace []string
	for time.Since(flip) < 1500*time.Millisecond {
		st := read()
		trace = append(trace, fmt.Sprintf("+%v %v", time.Since(flip).Round(time.Millisecond), st))
		if st == resilience.StateClosed && closedAt.IsZero() {
			closedAt = time.Now()
		}
		if st == resilience.StateOpen && !closedAt.IsZero() && reopenAt.IsZero() {
			reopenAt = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	final := read()
	if !closedAt.IsZero() {
		if reopenAt.IsZero() {
			t.Errorf("fleet closed %v after the dependency failed again and never reopened (1.5 s); final %v; refused %d", closedAt.Sub(flip), final, refusedAfter.Load())
		} else if d := reopenAt.Sub(closedAt); d > 3*every {
			t.Errorf("fleet reopened %v after it closed (want within ~2 intervals)", d)
		} else {
			t.Logf("closed +%v, reopened %v later", closedAt.Sub(flip).Round(time.Millisecond), reopenAt.Sub(closedAt).Round(time.Millisecond))
		}
	} else {
		t.Logf("fleet never seen closed after the flip (a probe failure reopened it): final %v", final)
	}
	if final == resilience.StateClosed {
		t.Errorf("fleet closed 1.5 s after the dependency failed again")
	}
	if t.Failed() {
		t.Logf("trace: %v", trace)
	}
}
