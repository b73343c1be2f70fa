package idempotencystore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// r165Client is a client of addr with ContextTimeoutEnabled, closed when
// the test ends.
func r165Client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// r165Key is the Redis key the store keeps a guard's key of scope under
// (the package's documented layout: a hash of the scope, then the key).
func r165Key(prefix, scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return prefix + hex.EncodeToString(sum[:16]) + ":" + key
}

// r165Proxy forwards to a server and, once armed, loses the reply to the
// first command whose bytes contain a trigger: the command reaches the
// server and runs, its answer never reaches the client. Mode close then
// resets the connection (the client sees EOF and may resend); mode hang
// keeps it open and silent (the client times out).
type r165Proxy struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	trigger []byte
	hang    bool
	lost    atomic.Int32
	conns   []net.Conn
}

func newR165Proxy(t testing.TB, target string) *r165Proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &r165Proxy{l: l, target: target}
	go p.accept()
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *r165Proxy) Addr() string { return p.l.Addr().String() }

// Arm loses the reply to the next command containing trigger.
func (p *r165Proxy) Arm(trigger string, hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger, p.hang = []byte(trigger), hang
}

func (p *r165Proxy) take(b []byte) (hit, hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trigger != nil && bytes.Contains(b, p.trigger) {
		p.trigger = nil
		return true, p.hang
	}
	return false, false
}

func (p *r165Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		var drop atomic.Int32 // 0 forward, 1 lose and close, 2 lose and hang
		go func() {           // client to server
			buf := make([]byte, 64<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 {
					if hit, hang := p.take(buf[:n]); hit {
						if hang {
							drop.Store(2)
						} else {
							drop.Store(1)
						}
					}
					if _, werr := out.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					_ = out.Close()
					return
				}
			}
		}()
		go func() { // server to client
			buf := make([]byte, 64<<10)
			for {
				n, err := out.Read(buf)
				if n > 0 {
					switch drop.Load() {
					case 1:
						p.lost.Add(1)
						_ = in.Close()
						_ = out.Close()
						return
					case 2:
						p.lost.Add(1)
						continue // silent from now on
					}
					if _, werr := in.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					_ = in.Close()
					return
				}
			}
		}()
	}
}
