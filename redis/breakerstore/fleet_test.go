package breakerstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The tests in this file run each replica as a separate OS process (this
// test binary run again as TestFleetReplica) that calls an HTTP
// dependency of the test's, which counts what reaches it, through a
// breaker shared on a real redis-server; the test kills, freezes, cuts
// and slows Redis or one replica's link to it.

const (
	envFleetConfig = "BREAKERSTORE_FLEET_CONFIG" // a replicaConfig in JSON
	binWidth       = 10 * time.Millisecond       // of the outcomes a replica reports
)

// replicaConfig is one replica process's.
type replicaConfig struct {
	Addrs       []string          // Redis: one server, or a cluster's nodes
	Via         map[string]string // a server's address -> the proxy to dial instead (links)
	Name        string
	Dependency  string  // URL
	Consecutive int     // ConsecutiveFailures; -1: the default
	Rate        float64 // FailureRate
	Min         uint32
	WindowMS    int // in 10 buckets
	OpenMS      int
	FlushMS     int
	PauseUS     int // between calls
}

func (c replicaConfig) options(store breaker.SharedStore) []breaker.Option {
	o := []breaker.Option{breaker.Shared(store), breaker.FailureRate(c.Rate, c.Min), breaker.Window(time.Duration(c.WindowMS)*time.Millisecond, 10),
		breaker.OpenTimeout(time.Duration(c.OpenMS) * time.Millisecond), breaker.FlushInterval(time.Duration(c.FlushMS) * time.Millisecond)}
	if c.Consecutive >= 0 {
		o = append(o, breaker.ConsecutiveFailures(uint32(c.Consecutive)))
	}
	return o
}

// TestFleetReplica is not a test on its own: the tests of this file run
// it as a replica process. It reads commands on stdin: "run" (call the
// dependency in a loop), "stop" (end the loop; answers STOPPED), "calls N"
// (N calls; answers DONE ok failed rejected), "quit" (Close, then print the
// outcomes by time: B bin ok failed rejected; CLOSE ns lag error, lag
// being how far the process fell behind its clock during Close).
func TestFleetReplica(t *testing.T) {
	js := os.Getenv(envFleetConfig)
	if js == "" {
		t.Skip("run as a replica by the fleet tests")
	}
	var cfg replicaConfig
	require.NoError(t, json.Unmarshal([]byte(js), &cfg))
	// Every connection to a server with a proxy in cfg.Via goes through it:
	// a cluster client dials the nodes it learns of by their addresses.
	var dial func(ctx context.Context, network, addr string) (net.Conn, error) // go-redis's own if nil
	if len(cfg.Via) > 0 {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := cfg.Via[addr]; ok {
				addr = p
			}
			return (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
		}
	}
	var c redis.UniversalClient
	if len(cfg.Addrs) == 1 {
		c = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: dial})
	} else {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: dial,
			ReadTimeout: breakerstore.ClusterReadTimeout}) // the slot map learned again soon after a failover
	}
	defer c.Close()
	var outMu sync.Mutex // stdout's lines whole
	say := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	events := resilience.ListenerFunc(func(e resilience.Event) {
		switch e.Kind {
		case resilience.EventSharedStateUnavailable, resilience.EventSharedStateRestored:
			say("EV %d %s", time.Now().UnixNano(), e.Kind)
		}
	})
	b := breaker.New(cfg.Name, append(cfg.options(breakerstore.New(c, "fleet:")), breaker.WithListener(events))...)
	var slowest, slowestOwn atomic.Int64 // the longest call, and the longest time a call spent in the breaker, in ns
	longest := func(v *atomic.Int64, d int64) {
		for {
			if old := v.Load(); d <= old || v.CompareAndSwap(old, d) {
				return
			}
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	var mu sync.Mutex
	bins := map[int64]*[3]int{}
	call := func() int { // 0 ok, 1 failed, 2 rejected
		start := time.Now()
		var inOp time.Duration
		defer func() {
			d := time.Since(start)
			longest(&slowest, int64(d))
			longest(&slowestOwn, int64(d-inOp))
		}()
		err := b.Execute(context.Background(), func(ctx context.Context) error {
			opStart := time.Now()
			defer func() { inOp = time.Since(opStart) }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Dependency, nil)
			req.Header.Set("X-Fleet", b.FleetState().String())
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return errors.New(res.Status)
			}
			return nil
		})
		k := 0
		switch {
		case breaker.IsRejection(err):
			k = 2
		case err != nil:
			k = 1
		}
		bin := time.Now().UnixNano() / int64(binWidth)
		mu.Lock()
		if bins[bin] == nil {
			bins[bin] = new([3]int)
		}
		bins[bin][k]++
		mu.Unlock()
		return k
	}
	var running sync.WaitGroup
	var stop atomic.Bool
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.Fields(in.Text())
		if len(cmd) == 0 {
			continue
		}
		switch cmd[0] {
		case "run":
			stop.Store(false)
			running.Go(func() {
				for !stop.Load() {
					call()
					time.Sleep(time.Duration(cfg.PauseUS) * time.Microsecond)
				}
			})
		case "stop":
			stop.Store(true)
			running.Wait()
			say("STOPPED")
		case "calls":
			n, _ := strconv.Atoi(cmd[1])
			var got [3]int
			for range n {
				got[call()]++
			}
			say("DONE %d %d %d", got[0], got[1], got[2])
		case "quit":
			stop.Store(true)
			running.Wait()
			lag := lagMeter()
			start := time.Now()
			err := b.Close()
			took := time.Since(start)
			behind := lag()
			mu.Lock()
			for k, v := range bins {
				say("B %d %d %d %d", k, v[0], v[1], v[2])
			}
			mu.Unlock()
			say("MAX %d %d", slowest.Load(), slowestOwn.Load())
			say("CLOSE %d %d %v", took.Nanoseconds(), behind.Nanoseconds(), err)
			return
		}
	}
}

// lagMeter starts measuring how far this process falls behind its clock:
// a goroutine sleeps 2 ms at a time and notes how much longer each sleep
// took. The function it returns stops it and tells the most. A timing
// measured while the process fell behind says nothing about the code.
func lagMeter() func() time.Duration {
	const step = 2 * time.Millisecond
	stop, done := make(chan struct{}), make(chan struct{})
	var most time.Duration
	go func() {
		defer close(done)
		last := time.Now()
		for {
			select {
			case <-stop:
				most = max(most, time.Since(last)-step)
				return
			case <-time.After(step):
			}
			now := time.Now()
			most = max(most, now.Sub(last)-step)
			last = now
		}
	}()
	return func() time.Duration {
		close(stop)
		<-done
		return max(most, 0)
	}
}

// replica is a replica process, seen from the test.
type replica struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	bins    map[int64][3]int // after quit
	close   time.Duration    // Close's, after quit
	lag     time.Duration    // how far the process fell behind its clock during Close
	slowest time.Duration    // the longest call, after quit
	own     time.Duration    // the longest time a call spent in the breaker, after quit
	events  []event          // of its shared state, after quit
}

func startReplica(t *testing.T, cfg replicaConfig) *replica {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	js, _ := json.Marshal(cfg)
	cmd := exec.Command(exe, "-test.run=^TestFleetReplica$", "-test.count=1")
	cmd.Env = append(os.Environ(), envFleetConfig+"="+string(js))
	var stderr bytes.Buffer // go-redis logs every failed dial: shown only if the test fails
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &replica{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16)}
	go func() {
		defer close(r.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			r.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			e := stderr.String()
			t.Logf("a replica's stderr (its end):\n%s", e[max(0, len(e)-1500):])
		}
	})
	return r
}

func (r *replica) send(cmd string) {
	_, err := fmt.Fprintln(r.stdin, cmd)
	require.NoError(r.t, err)
}

// await returns the first line starting with prefix.
func (r *replica) await(prefix string) string {
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-r.lines:
			require.True(r.t, ok, "the replica ended before %q", prefix)
			var ns int64
			var kind string
			if _, err := fmt.Sscanf(l, "EV %d %s", &ns, &kind); err == nil {
				r.events = append(r.events, event{time.Unix(0, ns), kind})
				continue
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			r.t.Fatalf("no %q from the replica", prefix)
		}
	}
}

// quit closes the replica and takes its outcomes.
func (r *replica) quit() {
	r.send("quit")
	r.bins = map[int64][3]int{}
	for {
		l := r.await("")
		var bin int64
		var v [3]int
		if _, err := fmt.Sscanf(l, "B %d %d %d %d", &bin, &v[0], &v[1], &v[2]); err == nil {
			r.bins[bin] = v
			continue
		}
		var ns int64
		var own int64
		if _, err := fmt.Sscanf(l, "MAX %d %d", &ns, &own); err == nil {
			r.slowest, r.own = time.Duration(ns), time.Duration(own)
			continue
		}
		if rest, ok := strings.CutPrefix(l, "CLOSE "); ok {
			f := strings.Fields(rest)
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			lag, _ := strconv.ParseInt(f[1], 10, 64)
			r.close, r.lag = time.Duration(ns), time.Duration(lag)
			return
		}
	}
}

// event is one of a replica's events, by its kind's name.
type event struct {
	at   time.Time
	kind string
}

// sharingEvents lists the replica's losses and recoveries of its store,
// for a failure's message.
func (r *replica) sharingEvents() (s string) {
	for _, e := range r.events {
		if strings.HasPrefix(e.kind, "shared_state") {
			s += fmt.Sprintf(" %s %s", e.at.Format("15:04:05.000"), e.kind)
		}
	}
	return s
}

// sharing returns whether the replica had lost its store
// (EventSharedStateUnavailable) at from or lost it after, and when it
// first shared again after from (EventSharedStateRestored; zero if never).
func (r *replica) sharing(from time.Time) (lost bool, back time.Time) {
	for _, e := range r.events {
		if e.at.Before(from) { // a replica alone already at from has lost it too: a flush late on a loaded machine (CI-like load: its loss came before the cut)
			switch e.kind {
			case resilience.EventSharedStateUnavailable.String():
				lost = true
			case resilience.EventSharedStateRestored.String():
				lost = false
			}
			continue
		}
		if e.kind == resilience.EventSharedStateUnavailable.String() {
			lost = true
		}
		if e.kind == resilience.EventSharedStateRestored.String() && back.IsZero() {
			back = e.at
		}
	}
	return lost, back
}

// first returns when the replica first had an outcome of kind k (0 ok, 1
// failed, 2 rejected) at or after from, to a bin's width; ok false if
// never.
func (r *replica) first(k int, from time.Time) (time.Duration, bool) {
	lo := from.UnixNano() / int64(binWidth)
	best := int64(-1)
	for bin, v := range r.bins {
		if bin >= lo && v[k] > 0 && (best < 0 || bin < best) {
			best = bin
		}
	}
	if best < 0 {
		return 0, false
	}
	return max(time.Duration(best*int64(binWidth)+int64(binWidth))-time.Duration(from.UnixNano()), 0), true
}

// count sums the outcomes of kind k in [from, to).
func (r *replica) count(k int, from, to time.Time) int {
	lo, hi := from.UnixNano()/int64(binWidth), to.UnixNano()/int64(binWidth)
	n := 0
	for bin, v := range r.bins {
		if bin >= lo && bin < hi {
			n += v[k]
		}
	}
	return n
}

// dependency is an HTTP service that counts what reaches it: all calls,
// and probes (calls made while the caller's fleet was half-open). It
// answers 500 while down, and holds calls while hung. Path /always
// answers 200 whatever the mode.
type dependency struct {
	srv             *httptest.Server
	down, hung      atomic.Bool
	reached, probes atomic.Int64
	releaseMu       sync.Mutex
	release         chan struct{}
}

func newDependency(t *testing.T) *dependency {
	d := &dependency{release: make(chan struct{})}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/always" {
			return
		}
		d.reached.Add(1)
		if r.Header.Get("X-Fleet") == resilience.StateHalfOpen.String() {
			d.probes.Add(1)
		}
		if d.hung.Load() {
			d.releaseMu.Lock()
			ch := d.release
			d.releaseMu.Unlock()
			select {
			case <-ch:
			case <-r.Context().Done():
			}
		}
		if d.down.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// unhang releases the calls held, and holds no more.
func (d *dependency) unhang() {
	d.hung.Store(false)
	d.releaseMu.Lock()
	close(d.release)
	d.release = make(chan struct{})
	d.releaseMu.Unlock()
}

// change is a change of the fleet's state, as the test heard it.
type change struct {
	at time.Time
	breaker.Fleet
}

// watcher hears the fleet's changes of state from Redis, as a replica
// would, but directly.
type watcher struct {
	mu      sync.Mutex
	changes []change
}

func watchFleet(t *testing.T, store *breakerstore.Store, name string) *watcher {
	w := &watcher{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = store.Watch(ctx, name, func(f breaker.Fleet) {
				w.mu.Lock()
				w.changes = append(w.changes, change{time.Now(), f})
				w.mu.Unlock()
			})
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	time.Sleep(50 * time.Millisecond) // subscribed
	return w
}

// next waits up to d for a change to st after from, and returns it.
func (w *watcher) next(st resilience.State, from time.Time, d time.Duration) (change, bool) {
	deadline := time.Now().Add(d)
	for {
		w.mu.Lock()
		for _, c := range w.changes {
			if c.State == st && !c.at.Before(from) {
				w.mu.Unlock()
				return c, true
			}
		}
		w.mu.Unlock()
		if time.Now().After(deadline) {
			return change{}, false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// last returns the last change to st before before.
func (w *watcher) last(st resilience.State, before time.Time) (change, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.changes) - 1; i >= 0; i-- {
		if c := w.changes[i]; c.State == st && c.at.Before(before) {
			return c, true
		}
	}
	return change{}, false
}

// since returns the changes after from.
func (w *watcher) since(from time.Time) []change {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []change
	for _, c := range w.changes {
		if !c.at.Before(from) {
			out = append(out, c)
		}
	}
	return out
}

// fleetName is a breaker name of the test's own.
func fleetName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// policy is the FleetPolicy of cfg, to read the fleet's totals.
func (c replicaConfig) policy() breaker.FleetPolicy {
	return breaker.FleetPolicy{Window: time.Duration(c.WindowMS) * time.Millisecond, Buckets: 10, OpenTimeout: time.Duration(c.OpenMS) * time.Millisecond}
}

// skipUnlessProcesses skips the test inside a replica process.
func skipUnlessProcesses(t *testing.T) {
	if os.Getenv(envFleetConfig) != "" || os.Getenv(envReplicaAddr) != "" {
		t.Skip("a replica")
	}
}
