package redistest

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a redis-server replicating from masterAddr
// (host:port: a [Server]'s Addr, or a [Proxy] in front of it, so that the
// test can cut the replication link), as [Start] does, and waits until its
// link to the master is up and the first sync is done. It sets the
// master's repl-diskless-sync-delay to 0 first, so that the sync starts at
// once rather than 5 s later.
func StartReplica(t testing.TB, masterAddr string, args ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on the PATH (.ci/run installs one)")
	}
	m := redis.NewClient(&redis.Options{Addr: masterAddr, ContextTimeoutEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err = m.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
	cancel()
	_ = m.Close()
	if err != nil {
		t.Fatalf("CONFIG SET repl-diskless-sync-delay 0 on the master at %s: %v", masterAddr, err)
	}
	s := Start(t, append([]string{"--replicaof", host, port}, args...)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info := s.replication()
		if info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica at %s did not sync with %s: %v", s.addr, masterAddr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReplOffset returns the server's replication offset: on a master, how
// far its replication stream goes (master_repl_offset); on a replica, how
// far it has applied it (slave_repl_offset). -1 if it does not answer.
func (s *Server) ReplOffset() int64 {
	info := s.replication()
	v, ok := info["slave_repl_offset"]
	if !ok {
		v, ok = info["master_repl_offset"]
	}
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Promote makes a replica a master (REPLICAOF NO ONE), as Sentinel or a
// managed Redis does in a failover.
func (s *Server) Promote() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		s.t.Fatalf("REPLICAOF NO ONE on %s: %v", s.addr, err)
	}
}

// replication returns the fields of INFO replication, or nil if the
// server does not answer.
func (s *Server) replication() map[string]string {
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	text, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	info := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	return info
}

// Switch is a TCP proxy on 127.0.0.1 whose target the test can change,
// as one address in front of a primary that fails over (Sentinel behind a
// virtual IP, a managed Redis endpoint): [Switch.Retarget] closes every
// connection, and the clients' new connections go to the new target. It
// is safe for concurrent use.
type Switch struct {
	l net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewSwitch starts a switch to target (host:port), closed when the test
// ends.
func NewSwitch(t testing.TB, target string) *Switch {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Switch{l: l, target: target, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		_ = s.l.Close()
		s.closeAll()
		s.wg.Wait()
	})
	return s
}

// Addr returns the switch's host:port, for the clients.
func (s *Switch) Addr() string { return s.l.Addr().String() }

// Retarget sends new connections to target from now on and closes the
// ones open, to the old target.
func (s *Switch) Retarget(target string) {
	s.mu.Lock()
	s.target = target
	s.mu.Unlock()
	s.closeAll()
}

func (s *Switch) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

func (s *Switch) accept() {
	for {
		in, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		s.mu.Lock()
		s.conns[in], s.conns[out] = struct{}{}, struct{}{}
		s.mu.Unlock()
		var once sync.Once
		done := func() {
			once.Do(func() {
				_ = in.Close()
				_ = out.Close()
				s.mu.Lock()
				delete(s.conns, in)
				delete(s.conns, out)
				s.mu.Unlock()
			})
		}
		s.wg.Go(func() { _, _ = io.Copy(out, in); done() })
		s.wg.Go(func() { _, _ = io.Copy(in, out); done() })
	}
}
