// Package redistest gives tests a Redis server: an in-process miniredis,
// the real redis-server named by RESILIENCEKIT_REDIS_ADDR (host:port),
// which .ci/run starts, or a redis-server process of the test's own, to
// kill, freeze and restart.
package redistest

import (
	"net"
	"os"
	"os/exec"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{t: t, addr: addr, dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	return s
}

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", s.dir, "--save", ""}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for range 200 {
		if c, err := net.Dial("tcp", s.addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("redis-server did not listen on %s", s.addr)
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
// directory, so that it reloads its append-only file if it had one.
func (s *Server) Restart() { s.start() }

// Freeze stops the server with SIGSTOP: it keeps its connections open and
// answers nothing, as a server stuck in a long pause would.
func (s *Server) Freeze() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
