package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r50NoLog struct{}

func (r50NoLog) Printf(context.Context, string, ...interface{}) {}

func init() { redis.SetLogger(r50NoLog{}) }

var r50DepErr = errors.New("review50: dependency down")

type r50Dep struct{ down atomic.Bool }

func (d *r50Dep) op(ctx context.Context) error {
	if d.down.Load() {
		return r50DepErr
	}
	return nil
}

type r50Replica struct {
	b      *breaker.Breaker
	c      *redis.Client
	events sync.Map
}

func r50Replicas(t *testing.T, addr, name string, n int, opts ...breaker.Option) []*r50Replica {
	t.Helper()
	var rs []*r50Replica
	for i := 0; i < n; i++ {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		r := &r50Replica{c: c}
		o := append([]breaker.Option{breaker.Shared(breakerstore.New(c, "r50:")), breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			v, _ := r.events.LoadOrStore(e.Kind, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}))}, opts...)
		r.b = breaker.New(name, o...)
		t.Cleanup(func() { _ = r.b.Close() })
		rs = append(rs, r)
	}
	return rs
}

// drive calls each replica every 2 ms until stop; it reports, per replica,
// the number of rejections and the last rejection's time.
type r50Drive struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	rejected []atomic.Int64
	lastRej  []atomic.Int64 // unix ns
	ok       []atomic.Int64
	failed   []atomic.Int64
}

func r50Start(rs []*r50Replica, d *r50Dep) *r50Drive {
	dr := &r50Drive{stop: make(chan struct{}), rejected: make([]atomic.Int64, len(rs)), lastRej: make([]atomic.Int64, len(rs)), ok: make([]atomic.Int64, len(rs)), failed: make([]atomic.Int64, len(rs))}
	for i, r := range rs {
		dr.wg.Go(func() {
			for {
				select {
				case <-dr.stop:
					return
				default:
				}
				err := r.b.Execute(context.Background(), d.op)
				switch {
				case err == nil:
					dr.ok[i].Add(1)
				case breaker.IsRejection(err):
					dr.rejected[i].Add(1)
					dr.lastRej[i].Store(time.Now().UnixNano())
				default:
					dr.failed[i].Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return dr
}

func (dr *r50Drive) halt() { close(dr.stop); dr.wg.Wait() }

func (dr *r50Drive) reset() {
	for i := range dr.rejected {
		dr.rejected[i].Store(0)
		dr.lastRej[i].Store(0)
		dr.ok[i].Store(0)
		dr.failed[i].Store(0)
	}
}

// waitOpen waits until every replica's fleet view is open.
func r50WaitFleet(t *testing.T, rs []*r50Replica, st resilience.State, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		all := true
		for _, r := range rs {
			if r.b.FleetState() != st {
				all = false
			}
		}
		if all {
			return time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fleet not %v within %v", st, within)
	return 0
}

// rejectedAfter reports, per replica, how long after from the last
// rejection was.
func (dr *r50Drive) rejectedAfter(from time.Time) []time.Duration {
	var out []time.Duration
	for i := range dr.lastRej {
		l := dr.lastRej[i].Load()
		if l == 0 || l < from.UnixNano() {
			out = append(out, 0)
			continue
		}
		out = append(out, time.Duration(l-from.UnixNano()))
	}
	return out
}

func r50Opts(flush, openT time.Duration, half uint32) []breaker.Option {
	return []breaker.Option{breaker.FailureRate(0.5, 10), breaker.Window(2*time.Second, 10), breaker.ConsecutiveFailures(0),
		breaker.OpenTimeout(openT), breaker.HalfOpenRequests(half), breaker.FlushInterval(flush)}
}

// Close with Redis frozen: bounded by two flush intervals; goroutines left.
func TestReview50_CloseFrozen(t *testing.T) {
	srv := redistest.Start(t)
	flush := 100 * time.Millisecond
	rs := r50Replicas(t, srv.Addr(), "dep", 5, r50Opts(flush, 300*time.Millisecond, 1)...)
	dep := &r50Dep{}
	dr := r50Start(rs, dep)
	time.Sleep(300 * time.Millisecond)
	dr.halt()
	before := runtime.NumGoroutine()
	srv.Freeze()
	defer srv.Thaw()
	time.Sleep(30 * time.Millisecond)
	for i, r := range rs {
		start := time.Now()
		err := r.b.Close()
		d := time.Since(start)
		t.Logf("replica %d: Close took %v, err %v", i, d, err)
		if d > 2*flush+50*time.Millisecond {
			t.Errorf("replica %d: Close took %v, more than two flush intervals", i, d)
		}
	}
	time.Sleep(50 * time.Millisecond)
	t.Logf("goroutines before freeze %d, after Close %d", before, runtime.NumGoroutine())
	srv.Thaw()
	time.Sleep(500 * time.Millisecond)
	t.Logf("goroutines after thaw %d", runtime.NumGoroutine())
}

// Redis full (maxmemory, noeviction): flushes fail; calls must go on; an
// outage must still open the replica's own breaker by its own rate.
func TestReview50_RedisFull(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	c := srv.Client()
	rs := r50Replicas(t, srv.Addr(), "dep", 2, r50Opts(50*time.Millisecond, 300*time.Millisecond, 1)...)
	dep := &r50Dep{}
	dr := r50Start(rs, dep)
	defer dr.halt()
	time.Sleep(200 * time.Millisecond)
	big := make([]byte, 64<<10)
	for i := 0; ; i++ {
		if err := c.Set(context.Background(), fmt.Sprint("fill", i), big, 0).Err(); err != nil {
			t.Logf("full after %d: %v", i, err)
			break
		}
	}
	dr.reset()
	time.Sleep(500 * time.Millisecond)
	for i := range rs {
		t.Logf("full, healthy: replica %d rejected %d ok %d", i, dr.rejected[i].Load(), dr.ok[i].Load())
		if dr.rejected[i].Load() > 0 {
			t.Errorf("replica %d: rejected healthy calls with Redis full", i)
		}
		v, _ := rs[i].events.Load(resilience.EventSharedStateUnavailable)
		t.Logf("unavailable events: %v", v)
	}
	dep.down.Store(true)
	time.Sleep(time.Second)
	for i, r := range rs {
		t.Logf("full, outage: replica %d state %v fleet %v rejected %d failed %d", i, r.b.State(), r.b.FleetState(), dr.rejected[i].Load(), dr.failed[i].Load())
		if r.b.State() == resilience.StateClosed && dr.rejected[i].Load() == 0 {
			t.Errorf("replica %d: an outage with Redis full did not open its own breaker", i)
		}
	}
}

// A low-traffic service (a call per replica every few flush intervals)
// after a real outage that has ended: does the fleet ever close?
func TestReview50_LowTrafficRecovery(t *testing.T) {
	for _, period := range []time.Duration{300 * time.Millisecond} {
		t.Run(period.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			flush := 50 * time.Millisecond
			rs := r50Replicas(t, srv.Addr(), "dep", 2, r50Opts(flush, 200*time.Millisecond, 1)...)
			dep := &r50Dep{}
			dr := r50Start(rs, dep)
			time.Sleep(100 * time.Millisecond)
			dep.down.Store(true)
			r50WaitFleet(t, rs, resilience.StateOpen, 3*time.Second)
			dr.halt()
			dep.down.Store(false)
			recovered := time.Now()
			var rej, ok atomic.Int64
			var lastRej atomic.Int64
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Go(func() {
					for time.Since(recovered) < 3*time.Second {
						time.Sleep(period)
						if err := r.b.Execute(context.Background(), dep.op); breaker.IsRejection(err) {
							rej.Add(1)
							lastRej.Store(int64(time.Since(recovered)))
						} else {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			st, _ := rs[0].b.Fleet(context.Background())
			t.Logf("call every %v per replica: rejected %d ok %d, last rejection %v after recovery; fleet %v", period, rej.Load(), ok.Load(), time.Duration(lastRej.Load()), st.State)
			if time.Duration(lastRej.Load()) > 2*time.Second {
				t.Errorf("healthy dependency still rejected %v after recovery (calls every %v, FlushInterval %v)", time.Duration(lastRej.Load()), period, flush)
			}
		})
	}
}

// The same with the defaults (FlushInterval 100 ms, OpenTimeout 100 ms),
// one replica calling once a second: locked out for ever?
func TestReview50_LowTrafficDefaults(t *testing.T) {
	srv := redistest.Start(t)
	rs := r50Replicas(t, srv.Addr(), "dep", 1, breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.ConsecutiveFailures(0))
	dep := &r50Dep{}
	dr := r50Start(rs, dep)
	time.Sleep(100 * time.Millisecond)
	dep.down.Store(true)
	r50WaitFleet(t, rs, resilience.StateOpen, 3*time.Second)
	dr.halt()
	dep.down.Store(false)
	recovered := time.Now()
	var rej, ok int
	for time.Since(recovered) < 5*time.Second {
		time.Sleep(time.Second)
		if err := rs[0].b.Execute(context.Background(), dep.op); breaker.IsRejection(err) {
			rej++
		} else {
			ok++
		}
	}
	t.Logf("one call a second after recovery: rejected %d ok %d; fleet %v", rej, ok, rs[0].b.FleetState())
	if ok == 0 {
		t.Errorf("healthy dependency rejected for 5 s after recovery: every one of %d calls", rej)
	}
}

// Redis holds an open state (persisted, restarted) from replicas long
// gone; new replicas start against a healthy dependency.
func TestReview50_StaleOpenNewReplicas(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	flush, openT := 50*time.Millisecond, 300*time.Millisecond
	old := r50Replicas(t, srv.Addr(), "dep", 2, r50Opts(flush, openT, 1)...)
	dep := &r50Dep{}
	dr := r50Start(old, dep)
	time.Sleep(100 * time.Millisecond)
	dep.down.Store(true)
	r50WaitFleet(t, old, resilience.StateOpen, 3*time.Second)
	dr.halt()
	for _, r := range old {
		_ = r.b.Close()
	}
	srv.Kill()
	srv.Restart()
	dep.down.Store(false)
	time.Sleep(time.Second)
	rs := r50Replicas(t, srv.Addr(), "dep", 2, r50Opts(flush, openT, 1)...)
	start := time.Now()
	dr = r50Start(rs, dep)
	time.Sleep(3 * time.Second)
	dr.halt()
	for i, d := range dr.rejectedAfter(start) {
		t.Logf("new replica %d: rejected %d ok %d, last rejection %v after start", i, dr.rejected[i].Load(), dr.ok[i].Load(), d)
		if d > 6*flush {
			t.Errorf("new replica %d rejected healthy calls for %v after its start on a stale open state", i, d)
		}
	}
}
