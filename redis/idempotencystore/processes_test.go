package idempotencystore_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// The environment of a replica process: the test binary itself, started
// by a test, serving the middleware on a Redis store.
const (
	envReplica = "RESILIENCEKIT_TEST_REPLICA_REDIS" // the Redis server's address
	envLease   = "RESILIENCEKIT_TEST_REPLICA_LEASE"
	envHandler = "RESILIENCEKIT_TEST_REPLICA_HANDLER" // how long the handler takes
	envRuns    = "RESILIENCEKIT_TEST_REPLICA_RUNS"    // a file each run appends a line to
)

// serveReplica serves the middleware on the Redis server of envReplica
// until it is killed, and prints its URL on stdout.
func serveReplica() {
	lease, _ := time.ParseDuration(os.Getenv(envLease))
	d, _ := time.ParseDuration(os.Getenv(envHandler))
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envReplica), ContextTimeoutEnabled: true})
	store := idempotencystore.New(client, "procs:")
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(lease),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.OpenFile(os.Getenv(envRuns), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(f, os.Getpid())
		f.Close()
		time.Sleep(d)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"pid":%d}`, os.Getpid())
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println("http://" + l.Addr().String())
	_ = http.Serve(l, h)
}

// proc is a replica process.
type proc struct {
	cmd *exec.Cmd
	url string
}

// startReplica starts a replica process on srv, killed when the test ends.
func startReplica(t *testing.T, srv *redistest.Server, lease, handler time.Duration, runs string) *proc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envReplica+"="+srv.Addr(), envLease+"="+lease.String(), envHandler+"="+handler.String(), envRuns+"="+runs)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	return &proc{cmd: cmd, url: strings.TrimSpace(line)}
}

// countRuns returns how many runs the replicas wrote to the file.
func countRuns(t *testing.T, runs string) int {
	b, err := os.ReadFile(runs)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// TestReplicaProcessesThroughARedisFreezeAsTheHandlerEnds: replicas as
// OS processes of their own; Redis frozen (SIGSTOP) 5 s as the handler
// ends, lease 8 s: one run, and both replicas replay it.
func TestReplicaProcessesThroughARedisFreezeAsTheHandlerEnds(t *testing.T) {
	srv := redistest.Start(t)
	runs := filepath.Join(t.TempDir(), "runs")
	a := startReplica(t, srv, 8*time.Second, 3*time.Second, runs)
	b := startReplica(t, srv, 8*time.Second, 3*time.Second, runs)
	first := make(chan int)
	start := time.Now()
	go func() { code, _, _ := post(t, a.url, "k"); first <- code }()
	time.Sleep(2900 * time.Millisecond)
	srv.Freeze()
	var repeats []int
	for time.Since(start) < 7500*time.Millisecond {
		code, _, _ := post(t, b.url, "k")
		repeats = append(repeats, code)
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Until(start.Add(7900 * time.Millisecond)))
	srv.Thaw()
	assert.Equal(t, http.StatusCreated, <-first)
	t.Logf("answered after %v; repeats on the other process meanwhile %v", time.Since(start).Round(time.Millisecond), repeats)
	require.Eventually(t, func() bool { c, _, _ := post(t, b.url, "k"); return c != http.StatusServiceUnavailable }, 2*time.Second, 100*time.Millisecond)
	for _, p := range []*proc{a, b} {
		code, replay, _ := post(t, p.url, "k")
		assert.Equal(t, http.StatusCreated, code)
		assert.Equal(t, "true", replay)
	}
	assert.Equal(t, 1, countRuns(t, runs), "one run")
}

// TestReplicaProcessKilledMidHandler: the replica running the handler is
// killed with SIGKILL; the key is free on another replica one lease later
// (2 s), not before, and then runs there once.
func TestReplicaProcessKilledMidHandler(t *testing.T) {
	srv := redistest.Start(t)
	runs := filepath.Join(t.TempDir(), "runs")
	const lease = 2 * time.Second
	a := startReplica(t, srv, lease, 5*time.Second, runs)
	b := startReplica(t, srv, lease, 100*time.Millisecond, runs)
	go func() { // its connection breaks with the process
		req, _ := http.NewRequest(http.MethodPost, a.url+"/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set(idempotency.Header, "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	_ = a.cmd.Process.Kill()
	killed := time.Now()
	var code int
	for code = 0; code != http.StatusCreated; time.Sleep(100 * time.Millisecond) {
		code, _, _ = post(t, b.url, "k")
		require.Contains(t, []int{http.StatusConflict, http.StatusCreated}, code)
		require.Less(t, time.Since(killed), 2*lease)
	}
	t.Logf("the key ran again on the other replica %v after the kill (lease %v)", time.Since(killed).Round(time.Millisecond), lease)
	assert.Greater(t, time.Since(killed), lease-lease/3-300*time.Millisecond, "held until its lease ran out")
	assert.Equal(t, 2, countRuns(t, runs), "the killed run, and the retry's")
}

// TestReplicaProcessPausedPastTheLease: the replica running the handler is
// stopped (SIGSTOP, as a long GC pause would) for longer than the lease.
// If no other request takes the key meanwhile, on SIGCONT it takes its
// claim again and stores its result: one run. If another replica takes it,
// that one runs (the effect twice: only the SQL store's CompleteTx fences
// it), and the paused one, resumed, loses its lease and overwrites
// nothing: every repeat replays the second run.
func TestReplicaProcessPausedPastTheLease(t *testing.T) {
	const lease = 2 * time.Second
	t.Run("no one takes the key", func(t *testing.T) {
		srv := redistest.Start(t)
		runs := filepath.Join(t.TempDir(), "runs")
		a := startReplica(t, srv, lease, time.Second, runs)
		first := make(chan int)
		go func() { code, _, _ := post(t, a.url, "k"); first <- code }()
		time.Sleep(200 * time.Millisecond)
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(lease + time.Second)
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		assert.Equal(t, http.StatusCreated, <-first)
		code, replay, _ := post(t, a.url, "k")
		assert.Equal(t, http.StatusCreated, code)
		assert.Equal(t, "true", replay)
		assert.Equal(t, 1, countRuns(t, runs), "one run")
	})
	t.Run("another replica takes it", func(t *testing.T) {
		srv := redistest.Start(t)
		runs := filepath.Join(t.TempDir(), "runs")
		a := startReplica(t, srv, lease, time.Second, runs)
		b := startReplica(t, srv, lease, 100*time.Millisecond, runs)
		first := make(chan int)
		go func() { code, _, _ := post(t, a.url, "k"); first <- code }()
		time.Sleep(200 * time.Millisecond)
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(lease + 500*time.Millisecond)
		code, _, second := post(t, b.url, "k")
		require.Equal(t, http.StatusCreated, code, "the lease ran out: the key is free")
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		t.Logf("the paused replica answered %d", <-first)
		for _, p := range []*proc{a, b} {
			code, replay, body := post(t, p.url, "k")
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, "true", replay)
			assert.Equal(t, second, body, "the second run's record, not overwritten")
		}
		assert.Equal(t, 2, countRuns(t, runs), "two runs: the pause outlived the lease and another took the key")
	})
}

// TestReplicaProcessesThroughARedisKillAsTheHandlerStarts: replicas as OS
// processes of their own; Redis killed (SIGKILL) as the handler starts and
// back 3 s later, lease 8 s, with AOF and without persistence: one run.
func TestReplicaProcessesThroughARedisKillAsTheHandlerStarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"AOF", []string{"--appendonly", "yes", "--appendfsync", "always"}},
		{"no persistence", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			runs := filepath.Join(t.TempDir(), "runs")
			a := startReplica(t, srv, 8*time.Second, 4*time.Second, runs)
			b := startReplica(t, srv, 8*time.Second, 4*time.Second, runs)
			first := make(chan int)
			start := time.Now()
			go func() { code, _, _ := post(t, a.url, "k"); first <- code }()
			// As the handler starts: once it has written its run, not a
			// guess at how long the claim takes on a loaded machine.
			require.Eventually(t, func() bool { return countRuns(t, runs) == 1 }, 5*time.Second, time.Millisecond)
			srv.Kill()
			var onA, onB []int
			for time.Since(start) < 3100*time.Millisecond {
				code, _, _ := post(t, a.url, "k")
				onA = append(onA, code)
				code, _, _ = post(t, b.url, "k")
				onB = append(onB, code)
				time.Sleep(500 * time.Millisecond)
			}
			srv.Restart()
			assert.Equal(t, http.StatusCreated, <-first)
			t.Logf("answered after %v; repeats on its process %v, on the other %v", time.Since(start).Round(time.Millisecond), onA, onB)
			for _, p := range []*proc{a, b} {
				// Within go-redis's dial backoff: after as many failed dials
				// as its pool has connections, it dials again once a second
				// (the other process's calls, and its store's connection
				// made after a call that ran out of time, may have made them).
				var code int
				var replay string
				assert.Eventually(t, func() bool {
					code, replay, _ = post(t, p.url, "k")
					return code == http.StatusCreated
				}, 2*time.Second, 100*time.Millisecond, "replayed once Redis is back: last %d", code)
				assert.Equal(t, "true", replay)
			}
			assert.Equal(t, 1, countRuns(t, runs), "one run")
		})
	}
}
