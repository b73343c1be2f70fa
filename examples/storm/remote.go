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

	"google.golang.org/grpc/metadata"
)

// The backend in a process of its own (-realtime -remote, over HTTP or
// -grpc): the storm binary starts itself with -serve, which listens on
// 127.0.0.1 for HTTP and for gRPC and serves every strategy's backend,
// each made on its run's first request from the scenario and the start
// the headers (gRPC: metadata) name (the wall clock, which both processes
// share). The requests' fates come from the same draws as in process; the
// backend's counts come back over HTTP at the end of the run (endPath).

// The headers a request to a backend in its own process adds to those of
// serveHTTP, and the metadata an RPC adds to those of serveGRPC (gRPC
// lowercases them).
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
	mu    sync.Mutex
	runs  map[string]*backend
	ended map[string]bool // runs ended: a request of theirs still in flight makes no backend again
}

// lookup returns the backend of run, made from the scenario key and the
// start the first time.
func (bs *backends) lookup(run, key string, start int64) (*backend, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.runs[run]; ok {
		return b, nil
	}
	if bs.ended[run] {
		return nil, fmt.Errorf("run %q has ended", run)
	}
	sc := scenarioByKey(key)
	if sc == nil {
		return nil, fmt.Errorf("no scenario %q", key)
	}
	b := newBackend(sc, time.Unix(0, start))
	bs.runs[run] = b
	return b, nil
}

// named returns the backend of the run that get's headers name.
func (bs *backends) named(get func(header string) string) (*backend, error) {
	start, _ := strconv.ParseInt(get(headerStart), 10, 64)
	return bs.lookup(get(headerRun), get(headerScenario), start)
}

// end stops the backend of run and returns its requests per bucket.
func (bs *backends) end(run string) []int {
	bs.mu.Lock()
	b, ok := bs.runs[run]
	delete(bs.runs, run)
	bs.ended[run] = true
	bs.mu.Unlock()
	if !ok {
		return nil
	}
	b.close()
	return b.requests.counts()
}

// newBackends returns the backends' process's state: no runs yet.
func newBackends() *backends {
	return &backends{runs: map[string]*backend{}, ended: map[string]bool{}}
}

// httpHandler serves the backends over HTTP, and ends a run at endPath.
func (bs *backends) httpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == endPath {
			var s []string
			for _, n := range bs.end(r.Header.Get(headerRun)) {
				s = append(s, strconv.Itoa(n))
			}
			_, _ = io.WriteString(w, strings.Join(s, ","))
			return
		}
		b, err := bs.named(r.Header.Get)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer(w, r, b)
	})
}

// serveBackends is the -serve mode: it listens on 127.0.0.1 for HTTP and
// for gRPC, writes the two addresses to out on one line, and serves until
// the process ends.
func serveBackends(out io.Writer) error {
	var lis [2]net.Listener
	for i := range lis {
		var err error
		if lis[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, lis[0].Addr().String(), lis[1].Addr().String())
	bs := newBackends()
	errs := make(chan error, 3)
	if os.Getenv(envParentPipe) != "" {
		// Started by startBackendProcess, which holds the other end of
		// stdin: it reaches its end when that process is gone, however it
		// ended (a SIGTERM to it alone, say), and this one ends too.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			errs <- nil
		}()
	}
	go func() { errs <- http.Serve(lis[0], bs.httpHandler()) }()
	go func() {
		errs <- grpcServer(func(md metadata.MD) (*backend, error) {
			return bs.named(func(k string) string { return first(md, k) })
		}).Serve(lis[1])
	}()
	return <-errs
}

// remoteAddrs are where the backends' process listens.
type remoteAddrs struct{ http, grpc string }

// envServe makes a test binary of this package the backends' process, as
// -serve makes the storm binary.
const envServe = "STORM_SERVE_BACKENDS"

// envParentPipe tells the backends' process that its stdin is a pipe from
// the process that started it, and to end with it.
const envParentPipe = "STORM_SERVE_PARENT_PIPE"

// startBackendProcess starts the storm binary itself with -serve and
// returns the addresses it listens on, and how to stop it.
func startBackendProcess() (remoteAddrs, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return remoteAddrs{}, nil, err
	}
	cmd := exec.Command(self, "-serve")
	cmd.Env = append(os.Environ(), envServe+"=1", envParentPipe+"=1") // a test binary serves on envServe (TestMain)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return remoteAddrs{}, nil, err
	}
	stdin, err := cmd.StdinPipe() // held open until stop, or until this process ends
	if err != nil {
		return remoteAddrs{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return remoteAddrs{}, nil, err
	}
	stop := func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addrs := strings.Fields(line)
	if err != nil || len(addrs) != 2 {
		stop()
		return remoteAddrs{}, nil, fmt.Errorf("the backend process did not say where it listens (%q): %v", line, err)
	}
	return remoteAddrs{http: addrs[0], grpc: addrs[1]}, stop, nil
}

// runIDs numbers the runs of a client process.
var runIDs struct {
	mu sync.Mutex
	n  int
}

// remoteRun is a strategy's run with its backend in the backends'
// process: the headers that name it there, as key, value, key, value...
type remoteRun []string

// newRemoteRun is a new run of b's scenario from b's start.
func newRemoteRun(b *backend) remoteRun {
	runIDs.mu.Lock()
	runIDs.n++
	run := fmt.Sprintf("%d-%d", os.Getpid(), runIDs.n)
	runIDs.mu.Unlock()
	return remoteRun{headerRun, run, headerScenario, b.sc.key, headerStart, strconv.FormatInt(b.start.UnixNano(), 10)}
}

// headers adds the run's headers to h.
func (r remoteRun) headers(h http.Header) {
	for i := 0; i < len(r); i += 2 {
		h.Set(r[i], r[i+1])
	}
}

// end ends the run in the backends' process at httpAddr, through client,
// and sets b's requests per bucket to those the process counted.
func (r remoteRun) end(client *http.Client, httpAddr string, b *backend) {
	req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+endPath, nil)
	if err != nil {
		panic(err)
	}
	r.headers(req.Header)
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

// remoteHTTP is the transport to the backends' process at addr over HTTP:
// each strategy's run has a backend of its own there, whose requests per
// bucket replace the local backend's when the run ends.
func remoteHTTP(addr string) transport {
	return transport{attempts: func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		run := newRemoteRun(b)
		url := "http://" + addr
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}}
		send := func(ctx context.Context, c *call, n uint64) error {
			return request(ctx, client, url, c, n, run.headers)
		}
		stop := func() {
			defer client.CloseIdleConnections()
			run.end(client, addr, b)
		}
		return send, stop
	}}
}

// remoteGRPC is the transport to the backends' process at addrs over
// gRPC (-grpc -remote), as grpcStorm is to servers in process: each
// strategy's run has a backend of its own there, named by the run's
// metadata, whose requests per bucket, fetched over HTTP, replace the
// local backend's when the run ends.
func remoteGRPC(addrs remoteAddrs) transport {
	return grpcVia(func(b *backend) grpcTarget {
		run := newRemoteRun(b)
		return grpcTarget{addr: addrs.grpc, md: run, stop: func() {
			client := &http.Client{}
			defer client.CloseIdleConnections()
			run.end(client, addrs.http, b)
		}}
	})
}
