package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The backend in a process of its own (-realtime -http -remote): the
// storm binary starts itself with -serve, which listens on 127.0.0.1 and
// serves every strategy's backend, each made on its run's first request
// from the scenario and the start the headers name (the wall clock, which
// both processes share). The requests' fates come from the same draws as
// in process; the backend's counts come back at the end of the run.

// The headers a request to a backend in its own process adds to those of
// serveHTTP.
const (
	headerRun      = "Storm-Run"      // the run: one backend each
	headerScenario = "Storm-Scenario" // the scenario's key
	headerStart    = "Storm-Start"    // the run's start, Unix nanoseconds
)

// endPath is where the client ends a run: the server stops its backend and
// answers its requests per bucket, comma-separated.
const endPath = "/storm-end"

// backends is the server side: the backends of the runs under way. It is
// safe for concurrent use.
type backends struct {
	mu   sync.Mutex
	runs map[string]*backend
}

// lookup returns the backend of run, made from the scenario key and the
// start the first time.
func (bs *backends) lookup(run, key string, start int64) (*backend, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.runs[run]; ok {
		return b, nil
	}
	sc := scenarioByKey(key)
	if sc == nil {
		return nil, fmt.Errorf("no scenario %q", key)
	}
	b := newBackend(sc, time.Unix(0, start))
	bs.runs[run] = b
	return b, nil
}

// end stops the backend of run and returns its requests per bucket.
func (bs *backends) end(run string) []int {
	bs.mu.Lock()
	b, ok := bs.runs[run]
	delete(bs.runs, run)
	bs.mu.Unlock()
	if !ok {
		return nil
	}
	b.close()
	return b.requests.counts()
}

// backendServer is the handler of the backends' process.
func backendServer() http.Handler {
	bs := &backends{runs: map[string]*backend{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run := r.Header.Get(headerRun)
		if r.URL.Path == endPath {
			var s []string
			for _, n := range bs.end(run) {
				s = append(s, strconv.Itoa(n))
			}
			_, _ = io.WriteString(w, strings.Join(s, ","))
			return
		}
		start, _ := strconv.ParseInt(r.Header.Get(headerStart), 10, 64)
		b, err := bs.lookup(run, r.Header.Get(headerScenario), start)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer(w, r, b)
	})
}

// serveBackends is the -serve mode: it listens on 127.0.0.1, writes its
// address to out, and serves until the process ends.
func serveBackends(out io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, lis.Addr().String())
	return http.Serve(lis, backendServer())
}

// envServe makes a test binary of this package the backends' process, as
// -serve makes the storm binary.
const envServe = "STORM_SERVE_BACKENDS"

// startBackendProcess starts the storm binary itself with -serve and
// returns the address it listens on, and how to stop it.
func startBackendProcess() (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "-serve")
	cmd.Env = append(os.Environ(), envServe+"=1") // a test binary serves on this (TestMain)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the backend process did not say where it listens: %w", err)
	}
	return strings.TrimSpace(addr), stop, nil
}

// runIDs numbers the runs of a client process.
var runIDs struct {
	mu sync.Mutex
	n  int
}

// remoteHTTP is the transport to the backends' process at addr: each
// strategy's run has a backend of its own there, whose requests per
// bucket replace the local backend's when the run ends.
func remoteHTTP(addr string) transport {
	return transport{attempts: func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		runIDs.mu.Lock()
		runIDs.n++
		run := fmt.Sprintf("%d-%d", os.Getpid(), runIDs.n)
		runIDs.mu.Unlock()
		url := "http://" + addr
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}}
		headers := func(h http.Header) {
			h.Set(headerRun, run)
			h.Set(headerScenario, b.sc.key)
			h.Set(headerStart, strconv.FormatInt(b.start.UnixNano(), 10))
		}
		send := func(ctx context.Context, c *call, n uint64) error {
			return request(ctx, client, url, c, n, headers)
		}
		stop := func() {
			defer client.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodPost, url+endPath, nil)
			if err != nil {
				panic(err)
			}
			headers(req.Header)
			resp, err := client.Do(req)
			if err != nil {
				panic(fmt.Sprintf("the backend process: %v", err))
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var counts []int
			for _, f := range strings.Split(string(body), ",") {
				if v, err := strconv.Atoi(f); err == nil {
					counts = append(counts, v)
				}
			}
			b.requests.set(counts)
		}
		return send, stop
	}}
}
