package idempotencystore_test

// Review 24: the save behind the answer (48d6324) and a replica process
// stopped gracefully (SIGTERM, http.Server.Shutdown) while Redis is frozen
// as its handler ends.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
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

const (
	r24EnvReplica = "REVIEW24_REPLICA_REDIS" // the Redis address, in the replica process
	r24EnvFreeze  = "REVIEW24_FREEZE_PID"    // the redis-server pid the handler freezes as it ends
	r24Lease      = 4 * time.Second
	r24StoreTO    = 300 * time.Millisecond
)

func r24Options() []idempotency.Option {
	return []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(r24Lease), idempotency.StoreTimeout(r24StoreTO)}
}

// r24Replica is the replica's main: it serves until SIGTERM, then shuts
// down gracefully and exits, as a service does in a rolling deploy.
func r24Replica() {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv(r24EnvReplica), ContextTimeoutEnabled: true})
	pid, _ := strconv.Atoi(os.Getenv(r24EnvFreeze))
	mw := idempotency.Middleware(idempotencystore.New(c, "r24:"), r24Options()...)
	srv := &http.Server{Handler: mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order made by pid %d", os.Getpid())
		_ = syscall.Kill(pid, syscall.SIGSTOP) // Redis freezes as the handler ends
	}))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println("LISTEN", ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	fmt.Println("SHUTDOWN", time.Since(start), err)
	os.Exit(0)
}

func r24State(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// Redis frozen 1.5 s as the handler ends (far inside the 4 s lease: the
// docs' "partition (or freeze) as the handler ends: the save is retried
// within the exact condition: once"), and the replica is sent SIGTERM once
// its client has the answer. Before 48d6324 the answer came after the
// save, so the shutdown lost nothing. Now the answer comes after one store
// timeout, Shutdown returns at once (no handler is running), the process
// exits with the save still to be retried, and the claim, held by no one,
// lets a retry on another replica run the handler again after the lease:
// two orders, and no EventNotStored anywhere.
func TestReview24ReplicaSIGTERMWhileRedisIsFrozenAsTheHandlerEnds(t *testing.T) {
	if os.Getenv(r24EnvReplica) != "" {
		r24Replica()
		return
	}
	rs := redistest.Start(t)
	admin := rs.Client()
	info, err := admin.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	var pid int
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	require.NotZero(t, pid)

	// The thaw: 1.5 s after Redis is seen stopped, whatever else happens.
	thawed := make(chan time.Duration, 1)
	go func() {
		for r24State(pid) != 'T' {
			time.Sleep(5 * time.Millisecond)
		}
		frozen := time.Now()
		time.Sleep(1500 * time.Millisecond)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		thawed <- time.Since(frozen)
	}()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	cmd := exec.Command(os.Args[0], "-test.run=^TestReview24ReplicaSIGTERMWhileRedisIsFrozenAsTheHandlerEnds$", "-test.count=1")
	cmd.Env = append(os.Environ(), r24EnvReplica+"="+rs.Addr(), r24EnvFreeze+"="+strconv.Itoa(pid), "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	var addr string
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "LISTEN "); ok {
			addr = a
			break
		}
	}
	require.NotEmpty(t, addr)

	post := func(url string) (int, bool, string, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set(idempotency.Header, "order-24")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, false, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader) == "true", string(b), nil
	}
	began := time.Now()
	status, _, body, err := post("http://" + addr)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	answered := time.Since(began)

	// SIGTERM once the client has its answer.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var shutdown string
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "SHUTDOWN") {
			shutdown = lines.Text()
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the replica did not exit")
	}
	exitedAfter := time.Since(began)
	frozenFor := <-thawed

	// Another replica, in this process, on the same Redis; the client's
	// retry (its answer lost on the way back), until it is not 409.
	var runs atomic.Int32
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	b := httptest.NewServer(idempotency.Middleware(idempotencystore.New(c, "r24:"), r24Options()...)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "order made by replica B")
		})))
	defer b.Close()
	var rStatus int
	var rReplayed bool
	var rBody string
	for deadline := time.Now().Add(r24Lease + 3*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rStatus, rReplayed, rBody, err = post(b.URL)
		if err != nil || rStatus != http.StatusConflict {
			break
		}
	}
	t.Logf("answered %v after it began (%q); replica: %s, exited %v after it began; Redis frozen %v; the retry on B: %d replayed=%v %q; B's runs %d",
		answered.Round(time.Millisecond), body, shutdown, exitedAfter.Round(time.Millisecond), frozenFor.Round(time.Millisecond), rStatus, rReplayed, rBody, runs.Load())
	require.NoError(t, err)
	assert.Zero(t, runs.Load(), "the handler ran a second time, on replica B: the save behind the answer died with the replica that was shut down gracefully")
	assert.True(t, rReplayed, "the retry should replay the first run's answer")
	assert.Equal(t, body, rBody)
}
