// Package redistest gives tests a Redis server: an in-process miniredis,
// the real redis-server named by RESILIENCEKIT_REDIS_ADDR (host:port),
// which .ci/run starts, or a redis-server process of the test's own, to
// kill, freeze and restart.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvAddr is the variable naming a real Redis server for tests.
const EnvAddr = "RESILIENCEKIT_REDIS_ADDR"

// Mini returns a client of a fresh miniredis and the server, both closed
// when the test ends.
func Mini(t testing.TB) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c, m
}

// Real returns a client of the real Redis server, closed when the test
// ends, or skips the test if EnvAddr is unset. Tests must use keys of
// their own: the server is shared.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skipf("%s is not set: no real Redis server (.ci/run starts one)", EnvAddr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	return c
}

// Server is a redis-server process of the test's own, which the test can
// kill, freeze and restart.
type Server struct {
	t    testing.TB
	addr string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Start starts redis-server on a free port of 127.0.0.1, in a directory
// of its own, with args added to its command line (such as "--appendonly",
// "yes"), and stops it when the test ends. It skips the test if there is
// no redis-server on the PATH (.ci/run installs one).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on the PATH (.ci/run installs one)")
	}
	s := &Server{t: t, dir: t.TempDir(), args: args}
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			s.Kill()
		}
	})
	// A port found free can be taken before redis-server binds it (by
	// another test's process, or as a client's ephemeral port), and so can
	// a cluster node's bus port: a server that exits without listening is
	// started again on other ports.
	var err error
	for range 5 {
		s.addr = freePort(t, isCluster(args))
		if err = s.launch(); err == nil {
			return s
		}
	}
	t.Fatal(err)
	return nil
}

// freePort returns 127.0.0.1:port for a port free now, and, for a cluster
// node, whose bus listens on port+10000, with that port free too.
func freePort(t testing.TB, bus bool) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return addr
		}
		if port+10000 <= 65535 {
			if b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
				b.Close()
				l.Close()
				return addr
			}
		}
		l.Close()
	}
}

// launch starts redis-server on s.addr and waits until it listens. It
// returns an error, with what the server printed, if the server exits
// first, and fails the test if it runs for 20 s without listening.
func (s *Server) launch() error {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", s.dir, "--save", ""}, s.args...)
	// A file, not a pipe: the process's Wait does not wait for a child
	// it forked (a save) that holds the pipe after a kill.
	out, err := os.CreateTemp(s.dir, "redis-server-*.log")
	if err != nil {
		s.t.Fatal(err)
	}
	defer out.Close()
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	printed := func() string { b, _ := os.ReadFile(out.Name()); return string(b) }
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s.answers() {
			return nil
		}
		// Asked without blocking, and with no goroutine to wait for it
		// (tests check for leaks): has the server exited?
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(s.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == s.cmd.Process.Pid {
			_ = s.cmd.Process.Release()
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited (status %d) before it listened:\n%s", s.addr, ws.ExitStatus(), printed())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	s.t.Fatalf("redis-server did not listen on %s within 20 s:\n%s", s.addr, printed())
	return nil
}

// answers reports whether the server is ready: s's process listens on
// s.addr (another process can hold the port the server failed to bind),
// and on its bus port if it is a cluster node (it binds that one after),
// and answers a PING with no LOADING error (it listens before it loads
// its snapshot or append-only file). It reads the sockets of Linux's
// /proc, so that a server whose commands are renamed is known too.
func (s *Server) answers() bool {
	_, port, _ := net.SplitHostPort(s.addr)
	p, _ := strconv.Atoi(port)
	ports := []int{p}
	if isCluster(s.args) {
		ports = append(ports, p+10000)
	}
	if !s.listens(ports) {
		return false
	}
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	return err == nil && !strings.HasPrefix(string(b[:n]), "-LOADING")
}

// isCluster reports whether a server started with args is a cluster node.
func isCluster(args []string) bool { return slices.Contains(args, "--cluster-enabled") }

// listens reports whether s's process listens on each of ports of
// 127.0.0.1.
func (s *Server) listens(ports []int) bool {
	tcp, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		s.t.Fatal(err)
	}
	sockets := map[int][]string{} // port: the sockets listening on it, as /proc/PID/fd links them
	for _, line := range strings.Split(string(tcp), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) <= 9 || f[3] != "0A" {
			continue
		}
		for _, p := range ports {
			if f[1] == fmt.Sprintf("0100007F:%04X", p) {
				sockets[p] = append(sockets[p], "socket:["+f[9]+"]")
			}
		}
	}
	if len(sockets) < len(ports) {
		return false
	}
	ours := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid)
	fds, _ := os.ReadDir(dir)
	for _, fd := range fds {
		if link, err := os.Readlink(dir + "/" + fd.Name()); err == nil {
			ours[link] = true
		}
	}
	for _, socks := range sockets {
		if !slices.ContainsFunc(socks, func(sock string) bool { return ours[sock] }) {
			return false
		}
	}
	return true
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Client returns a client of the server with ContextTimeoutEnabled, closed
// when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Live reports whether the server runs (it has not been killed, or has
// been restarted); a frozen server is live.
func (s *Server) Live() bool { return s.cmd != nil }

// Kill kills the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again after Kill, on the same port and
// directory, so that it reloads its snapshot or append-only file if it
// had one. It fails the test if the server runs (Thaw a frozen one), or
// if it cannot listen on its port (another process took it).
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("redistest: Restart of a server that runs (frozen or not): Kill it first")
	}
	if err := s.launch(); err != nil {
		s.t.Fatal(err)
	}
}

// Freeze stops the server with SIGSTOP: it keeps its connections open and
// answers nothing, as a server stuck in a long pause would.
func (s *Server) Freeze() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
