package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a server, for one client's
// link: the test can slow it down (each way) or cut it, as a partition
// would, and heal it. Clients in other processes can use it too. It is
// safe for concurrent use.
type Proxy struct {
	l      net.Listener
	target string
	delay  atomic.Int64 // each way, in ns
	cut    atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port), closed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port, for the client.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Delay holds every chunk of data d in each direction, from now on: a
// link of d one way, 2d a round trip.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Cut drops every byte in both directions from now on, connections kept
// open and new ones accepted, as a partition would: the client sees no
// answer and no error.
func (p *Proxy) Cut() { p.cut.Store(true) }

// Heal ends a Cut: it closes the connections that lost data (their
// clients connect again) and forwards again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.cut.Store(false)
}

func (p *Proxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
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
		p.track(in)
		p.track(out)
		var once sync.Once
		done := func() {
			once.Do(func() {
				_ = in.Close()
				_ = out.Close()
				p.mu.Lock()
				delete(p.conns, in)
				delete(p.conns, out)
				p.mu.Unlock()
			})
		}
		p.wg.Go(func() { p.pipe(out, in, done) })
		p.wg.Go(func() { p.pipe(in, out, done) })
	}
}

// chunk is data read at a time, to be written after the delay.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, each chunk after the delay, dropping what
// comes while the link is cut.
func (p *Proxy) pipe(dst, src net.Conn, done func()) {
	defer done()
	q := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done()
		for c := range q {
			if d := time.Until(c.at.Add(time.Duration(p.delay.Load()))); d > 0 {
				time.Sleep(d)
			}
			if p.cut.Load() {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				for range q { // drain
				}
				return
			}
		}
	})
	defer wg.Wait()
	defer close(q)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			q <- chunk{b: buf[:n], at: time.Now()}
		}
		if err != nil {
			return
		}
	}
}
