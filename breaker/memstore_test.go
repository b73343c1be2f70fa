package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// memStore is a breaker.SharedStore and breaker.SharedReader in memory, a
// double of the Redis one (redis/breakerstore) that follows its script
// step by step, on the same clock (milliseconds of time.Now, which a
// synctest bubble makes exact), so that the shared breaker's logic is
// tested without Redis:
//
//   - counts are fenced by generation (or GenerationUnknown), applied
//     once a batch (a batch is remembered for a window and a bucket),
//     added only while closed, into the bucket of the current time; the
//     fleet opens when the window's totals reach MinRequests and Rate;
//   - an open fleet is half-open from OpenTimeout after it opened; a
//     probe failure reopens it, HalfOpenRequests probe successes close
//     it; every change of state takes the next generation, clears the
//     counts and is published to the watchers (see watchingStore);
//   - half-open, a replica holds one grant at most; at most
//     HalfOpenRequests grants live at once with the probes that
//     succeeded; a grant expires three flush intervals after it was
//     granted unless its replica says its probe runs (then ProbeTimeout,
//     renewed at each flush); a replica that neither holds, runs nor
//     wants a probe gives its grant up, and one that asks again gets it
//     back; a replica whose own breaker is half-open gets a grant only if
//     no replica whose own breaker is closed asked in the last two flush
//     intervals (while open too);
//   - restarted empty (forget), it takes the first replica's view back,
//     open as opened OpenedFor ago if the replica says it is not closed,
//     under a generation never used before (the time in ms, or past the
//     replica's); an open state lasts a day at most if nobody asks.
//
// The test can make it fail, hang until ctx is done, or apply a Sync and
// lose its answer.
type memStore struct {
	mu     sync.Mutex
	fleets map[string]*memFleet
	subs   map[string][]chan breaker.Fleet // the watchers of a name

	syncs atomic.Int64 // Sync calls, answered or not
	fail  atomic.Bool  // answer an error, change nothing
	hang  atomic.Bool  // answer nothing until ctx is done
	lose  atomic.Int64 // apply this many more Syncs but answer an error, as if the answer were lost
}

// memFleet is the state the Redis store keeps under a breaker's keys.
type memFleet struct {
	gen      uint64
	open     bool
	opened   int64               // ms, while open: when it opened
	openEnds int64               // ms, while open: when the open key expires
	buckets  map[int64][2]uint64 // bucket number -> requests, failures
	batches  map[string]int64    // batch -> when it is forgotten, ms
	oks      uint64              // probe successes in gen
	grants   map[string]int64    // replica -> when its grant of gen expires, ms
	eager    int64               // ms: until then a replica whose own breaker is closed wants a probe of gen
}

// keepOpen is how long an open state lasts with nobody asking (a day).
const keepOpen = 24 * time.Hour

var errStoreDown = errors.New("store down")

func newMemStore() *memStore {
	return &memStore{fleets: map[string]*memFleet{}, subs: map[string][]chan breaker.Fleet{}}
}

// forget loses every fleet's state, as a server restarted empty.
func (m *memStore) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fleets = map[string]*memFleet{}
}

// state returns the fleet's state as the store holds it (open, or
// closed: half-open is open past its timeout) and its generation.
func (m *memStore) state(name string) (resilience.State, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fl := m.fleets[name]
	if fl == nil {
		return resilience.StateClosed, 0
	}
	if fl.live(time.Now().UnixMilli()) {
		return resilience.StateOpen, fl.gen
	}
	return resilience.StateClosed, fl.gen
}

// live reports whether the fleet is open (or half-open) at now: its open
// key has not expired.
func (fl *memFleet) live(now int64) bool { return fl.open && now <= fl.openEnds }

// window is the bucket of now and the buckets' length, in ms, by p.
func window(p breaker.FleetPolicy, now int64) (b, length int64) {
	length = max(p.Window.Milliseconds()/int64(p.Buckets), 1)
	return now / length, length
}

// totals sums the counts of the window that ends with bucket b.
func (fl *memFleet) totals(b int64, buckets int) (r, f uint64) {
	for i := b - int64(buckets) + 1; i <= b; i++ {
		r += fl.buckets[i][0]
		f += fl.buckets[i][1]
	}
	return r, f
}

// Sync implements breaker.SharedStore.
func (m *memStore) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	m.syncs.Add(1)
	if m.hang.Load() {
		<-ctx.Done()
		return breaker.Fleet{}, ctx.Err()
	}
	if err := m.refused(ctx); err != nil {
		return breaker.Fleet{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	got := m.sync(name, s)
	if m.lose.Add(-1) >= 0 {
		return breaker.Fleet{}, context.DeadlineExceeded
	}
	m.lose.Store(0)
	return got, nil
}

// refused returns why the store does not answer: ctx is done, or it
// fails.
func (m *memStore) refused(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.fail.Load() {
		return errStoreDown
	}
	return nil
}

// sync is the script, under m.mu.
func (m *memStore) sync(name string, s breaker.Sync) breaker.Fleet {
	p := s.Policy
	now := time.Now().UnixMilli()
	b, length := window(p, now)
	opent, flushms := p.OpenTimeout.Milliseconds(), max(p.FlushInterval.Milliseconds(), 1)
	fl := m.fleets[name]
	if fl == nil { // restarted empty, or new: a generation never used, the replica's view of the state
		fl = &memFleet{gen: max(uint64(now), s.Generation+1), batches: map[string]int64{}}
		fl.clear()
		if s.State != resilience.StateClosed {
			fl.open, fl.opened, fl.openEnds = true, now-max(s.OpenedFor.Milliseconds(), 0), now+keepOpen.Milliseconds()
		}
		m.fleets[name] = fl
	}
	if fl.open && !fl.live(now) {
		fl.open = false // the open key expired: closed, in the same generation
	}
	change := func(open bool) {
		fl.gen++
		fl.open = open
		if open {
			fl.opened, fl.openEnds = now, now+keepOpen.Milliseconds()
		}
		fl.clear()
		m.publish(name, fl.gen, open)
	}

	fresh := (s.Generation == fl.gen || s.GenerationUnknown) && (s.Batch == "" || fl.once(s.Batch, now, now+p.Window.Milliseconds()+length))
	if fresh && (s.ProbeSuccesses > 0 || s.ProbeFailures > 0) {
		delete(fl.grants, s.Replica) // reported: no longer held
	}
	gen0 := fl.gen // a probe's outcome below may close the fleet under a new one
	if fresh && fl.open && now >= fl.opened+opent {
		if s.ProbeFailures > 0 {
			change(true)
		} else if s.ProbeSuccesses > 0 {
			if fl.oks += uint64(s.ProbeSuccesses); fl.oks >= uint64(p.HalfOpenRequests) {
				change(false)
			}
		}
	}
	if fresh && !fl.open && s.Requests > 0 && fl.gen == gen0 {
		c := fl.buckets[b]
		fl.buckets[b] = [2]uint64{c[0] + s.Requests, c[1] + s.Failures}
	}
	if !fl.open {
		if r, f := fl.totals(b, p.Buckets); r >= uint64(p.MinRequests) && float64(f) >= p.Rate*float64(r) {
			change(true)
		}
	}
	if !fl.open {
		return breaker.Fleet{State: resilience.StateClosed, Generation: fl.gen}
	}
	if now < fl.opened+opent {
		if s.WantProbe && !s.OwnHalfOpen {
			fl.eager = now + 2*flushms
		}
		return breaker.Fleet{State: resilience.StateOpen, Generation: fl.gen}
	}
	return breaker.Fleet{State: resilience.StateHalfOpen, Generation: fl.gen, ProbeGranted: fl.grant(s, p, now, flushms)}
}

// clear starts a generation's counts, probe successes and grants afresh.
func (fl *memFleet) clear() {
	fl.buckets, fl.grants, fl.oks, fl.eager = map[int64][2]uint64{}, map[string]int64{}, 0, 0
}

// once records batch until forget, and reports whether it was new.
func (fl *memFleet) once(batch string, now, forget int64) bool {
	if until, ok := fl.batches[batch]; ok && now <= until {
		return false
	}
	fl.batches[batch] = forget
	return true
}

// grant decides the half-open fleet's grants for s's replica and reports
// whether it holds one.
func (fl *memFleet) grant(s breaker.Sync, p breaker.FleetPolicy, now, flushms int64) bool {
	live, mine := 0, false
	for r, until := range fl.grants {
		switch {
		case until <= now:
			delete(fl.grants, r)
		case r == s.Replica:
			mine = true
		default:
			live++
		}
	}
	running, held, want := s.ProbeRunning, s.ProbeHeld, s.WantProbe
	if s.Generation != fl.gen {
		running, held = false, false
	}
	if mine && running {
		fl.grants[s.Replica] = now + p.ProbeTimeout.Milliseconds()
	} else if mine && !held && !want {
		delete(fl.grants, s.Replica)
		mine = false
	}
	if want && !s.OwnHalfOpen {
		fl.eager = now + 2*flushms
	} else if want && now <= fl.eager {
		want = false // a replica whose own breaker is closed wants it
	}
	if !mine && want && uint64(live)+fl.oks < uint64(p.HalfOpenRequests) {
		fl.grants[s.Replica] = now + 3*flushms
		mine = true
	}
	return mine
}

// Read implements breaker.SharedReader: the state and the window's totals.
func (m *memStore) Read(ctx context.Context, name string, p breaker.FleetPolicy) (breaker.FleetStatus, error) {
	if err := m.refused(ctx); err != nil {
		return breaker.FleetStatus{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fl := m.fleets[name]
	if fl == nil {
		return breaker.FleetStatus{State: resilience.StateClosed}, nil
	}
	now := time.Now().UnixMilli()
	b, _ := window(p, now)
	st := breaker.FleetStatus{State: resilience.StateClosed, Generation: fl.gen}
	st.Requests, st.Failures = fl.totals(b, p.Buckets)
	if fl.live(now) {
		st.State = resilience.StateOpen
		if now >= fl.opened+p.OpenTimeout.Milliseconds() {
			st.State = resilience.StateHalfOpen
		}
	}
	return st, nil
}

// publish tells name's watchers of a change of state, as the script's
// PUBLISH does; a watcher that lags loses it (it learns at its flush).
func (m *memStore) publish(name string, gen uint64, open bool) {
	f := breaker.Fleet{State: resilience.StateClosed, Generation: gen}
	if open {
		f.State = resilience.StateOpen
	}
	for _, ch := range m.subs[name] {
		select {
		case ch <- f:
		default:
		}
	}
}

// watchingStore is a memStore that is a breaker.SharedWatcher too: the
// changes of state reach the replicas at once, or delay later.
type watchingStore struct {
	*memStore
	delay time.Duration
}

// Watch implements breaker.SharedWatcher. It fails at once while the
// store fails.
func (w watchingStore) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	if w.fail.Load() {
		return errStoreDown
	}
	ch := make(chan breaker.Fleet, 16)
	w.mu.Lock()
	w.subs[name] = append(w.subs[name], ch)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		subs := w.subs[name]
		for i, c := range subs {
			if c == ch {
				w.subs[name] = append(subs[:i:i], subs[i+1:]...)
				break
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f := <-ch:
			if err := pause(ctx, w.delay); err != nil {
				return err
			}
			changed(f)
		}
	}
}

// TestMemStoreFollowsTheScript: the double decides as the Redis store's
// script does, step by step, at its edges: the fleet opens at exactly
// MinRequests and exactly Rate, counts leave the window a bucket at a
// time, a batch counts once and only in its generation, half-open grants
// go to at most HalfOpenRequests replicas, and a store restarted empty
// takes a replica's view back under a generation never used.
func TestMemStoreFollowsTheScript(t *testing.T) {
	p := breaker.FleetPolicy{Rate: 0.5, MinRequests: 4, Window: time.Second, Buckets: 10, OpenTimeout: time.Second,
		HalfOpenRequests: 1, ProbeTimeout: time.Second, FlushInterval: 100 * time.Millisecond}
	type step struct {
		after  time.Duration // since the last step
		s      breaker.Sync  // sent under the generation last answered
		old    bool          // or under the one before
		forget bool          // restart empty first
		want   resilience.State
		grant  bool
		total  uint64 // requests in the window after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"opens at exactly MinRequests and Rate", []step{
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 2}, want: resilience.StateClosed, total: 3},
			{s: breaker.Sync{Batch: "b", Requests: 1}, want: resilience.StateOpen},
		}},
		{"just below the rate stays closed", []step{
			{s: breaker.Sync{Batch: "a", Requests: 5, Failures: 2}, want: resilience.StateClosed, total: 5},
		}},
		{"counts leave the window a bucket at a time", []step{
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 3}, want: resilience.StateClosed, total: 3},
			{after: 999 * time.Millisecond, s: breaker.Sync{Batch: "b", Requests: 0}, want: resilience.StateClosed, total: 3},
			{after: time.Millisecond, s: breaker.Sync{Batch: "c", Requests: 1}, want: resilience.StateClosed, total: 1},
		}},
		{"a batch counts once", []step{
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 3}, want: resilience.StateClosed, total: 3},
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 3}, want: resilience.StateClosed, total: 3},
		}},
		{"a batch of an old generation counts nothing", []step{
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 3}, want: resilience.StateClosed, total: 3},
			{s: breaker.Sync{Batch: "b", Requests: 3, Failures: 3}, old: true, want: resilience.StateClosed, total: 3},
		}},
		{"half-open grants one probe, to the replica that asks first", []step{
			{s: breaker.Sync{Batch: "a", Requests: 4, Failures: 4}, want: resilience.StateOpen},
			{after: time.Second, s: breaker.Sync{Replica: "x", WantProbe: true}, want: resilience.StateHalfOpen, grant: true},
			{s: breaker.Sync{Replica: "y", WantProbe: true}, want: resilience.StateHalfOpen},
			{s: breaker.Sync{Replica: "x"}, want: resilience.StateHalfOpen},
			{s: breaker.Sync{Replica: "y", WantProbe: true}, want: resilience.StateHalfOpen, grant: true},
		}},
		{"a replica whose own breaker is half-open yields to one whose own is closed", []step{
			{s: breaker.Sync{Batch: "a", Requests: 4, Failures: 4}, want: resilience.StateOpen},
			{after: 900 * time.Millisecond, s: breaker.Sync{Replica: "closed", WantProbe: true}, want: resilience.StateOpen},
			{after: 100 * time.Millisecond, s: breaker.Sync{Replica: "cut", WantProbe: true, OwnHalfOpen: true}, want: resilience.StateHalfOpen},
			{after: 200 * time.Millisecond, s: breaker.Sync{Replica: "cut", WantProbe: true, OwnHalfOpen: true}, want: resilience.StateHalfOpen, grant: true},
		}},
		{"a probe's success closes it, its batch, of the half-open generation, not counting in the new one", []step{
			{s: breaker.Sync{Batch: "a", Requests: 4, Failures: 4}, want: resilience.StateOpen},
			{after: time.Second, s: breaker.Sync{Replica: "x", WantProbe: true}, want: resilience.StateHalfOpen, grant: true},
			{s: breaker.Sync{Batch: "b", Replica: "x", Requests: 1, ProbeSuccesses: 1}, want: resilience.StateClosed, total: 0},
		}},
		{"restarted empty, the replica's open state comes back as opened when it said", []step{
			{s: breaker.Sync{Batch: "a", Requests: 4, Failures: 4}, want: resilience.StateOpen},
			{after: 600 * time.Millisecond, forget: true, s: breaker.Sync{State: resilience.StateOpen, OpenedFor: 600 * time.Millisecond}, want: resilience.StateOpen},
			{after: 400 * time.Millisecond, s: breaker.Sync{}, want: resilience.StateHalfOpen},
		}},
		{"restarted empty, a closed replica's old batch counts nothing", []step{
			{s: breaker.Sync{Batch: "a", Requests: 3, Failures: 3}, want: resilience.StateClosed, total: 3},
			{forget: true, s: breaker.Sync{Batch: "b", Requests: 4, Failures: 4}, want: resilience.StateClosed},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMemStore()
				first, err := m.Sync(t.Context(), "x", breaker.Sync{GenerationUnknown: true, Policy: p})
				require.NoError(t, err)
				gen := first.Generation
				for i, st := range tt.steps {
					time.Sleep(st.after)
					if st.forget {
						m.forget()
					}
					s := st.s
					s.Policy, s.Generation = p, gen
					if st.old {
						s.Generation--
					}
					got, err := m.Sync(t.Context(), "x", s)
					require.NoError(t, err)
					assert.Equal(t, st.want, got.State, "step %d", i)
					assert.Equal(t, st.grant, got.ProbeGranted, "step %d", i)
					if st.forget {
						assert.NotEqual(t, gen, got.Generation, "step %d: a generation never used", i)
					}
					gen = got.Generation
					read, err := m.Read(t.Context(), "x", p)
					require.NoError(t, err)
					assert.Equal(t, st.total, read.Requests, "step %d", i)
				}
			})
		})
	}
}
