package httpclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// review81Src is a caller's body that checks how it is used: never read
// concurrently, never read after Close, closed once.
type review81Src struct {
	data       []byte
	off        int
	rnd        *rand.Rand
	mu         sync.Mutex
	inRead     atomic.Int32
	closes     atomic.Int32
	concurrent atomic.Bool
	afterClose atomic.Bool
	failAt     int // >0: Read fails once off reaches it
}

func (s *review81Src) Read(b []byte) (int, error) {
	if s.inRead.Add(1) > 1 {
		s.concurrent.Store(true)
	}
	defer s.inRead.Add(-1)
	if s.closes.Load() > 0 {
		s.afterClose.Store(true)
		return 0, io.ErrClosedPipe
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 && s.off >= s.failAt {
		return 0, errors.New("review81: source failed")
	}
	if s.off == len(s.data) {
		return 0, io.EOF
	}
	n := min(len(b), len(s.data)-s.off, 1+s.rnd.IntN(9000))
	if s.rnd.IntN(10) == 0 {
		n = 0 // a 0, nil read
	}
	if s.failAt > 0 {
		n = min(n, s.failAt-s.off)
	}
	copy(b, s.data[s.off:s.off+n])
	s.off += n
	if s.off == len(s.data) && s.rnd.IntN(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (s *review81Src) Close() error { s.closes.Add(1); return nil }

func TestReview81ChunkMath(t *testing.T) {
	// Every offset maps to the chunk whose range holds it, chunks being
	// 4 KiB << k long and laid end to end.
	start := int64(0)
	for k := 0; k < 20; k++ {
		size := int64(keepFirst) << k
		for _, off := range []int64{start, start + 1, start + size/2, start + size - 1} {
			gk, at := chunk(off)
			if gk != k || at != off-start {
				t.Fatalf("chunk(%d) = %d,%d; want %d,%d", off, gk, at, k, off-start)
			}
		}
		start += size
	}
}

// review81Sizes are body lengths around the chunk boundaries and max.
func review81Sizes(max int64) []int64 {
	s := []int64{0, 1, 4095, 4096, 4097}
	start := int64(0)
	for k := 0; start < max+2*keepFirst; k++ {
		start += int64(keepFirst) << k
		s = append(s, start-1, start, start+1)
	}
	return append(s, max-1, max, max+1)
}

func review81ReadAll(t *testing.T, r io.Reader, rnd *rand.Rand, limit int) ([]byte, error) {
	var out []byte
	for limit < 0 || len(out) < limit {
		n := 1 + rnd.IntN(20000)
		if limit >= 0 {
			n = min(n, limit-len(out))
		}
		b := make([]byte, n)
		m, err := r.Read(b)
		out = append(out, b[:m]...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// A first attempt reads a random part, closes; a cut reads the rest ahead
// (canReplay); a second attempt must send the very bytes, whole.
func TestReview81ReplayExact(t *testing.T) {
	rnd := rand.New(rand.NewPCG(81, uint64(time.Now().UnixNano())))
	for _, max := range []int64{0, 1, 4096, 12288, 100000} {
		for _, size := range review81Sizes(max) {
			if size < 0 {
				continue
			}
			for rep := 0; rep < 2; rep++ {
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(rnd.Uint32())
				}
				src := &review81Src{data: data, rnd: rnd}
				p := &replay{src: src, max: max}
				r1, err := p.next()
				if err != nil {
					t.Fatal(err)
				}
				part := -1
				if size > 0 {
					part = rnd.IntN(int(size) + 1)
				}
				got1, _ := review81ReadAll(t, r1, rnd, part)
				if !bytes.Equal(got1, data[:len(got1)]) {
					t.Fatalf("max %d size %d: first attempt's bytes differ", max, size)
				}
				r1.Close()
				cut := rnd.IntN(2) == 0
				ok := p.canReplay(context.Background(), cut)
				fits := size <= max
				read := int64(len(got1))
				wantOK := fits || (!cut && read <= max && !p.over)
				if cut && ok != fits {
					t.Fatalf("max %d size %d cut: canReplay %v, fits %v", max, size, ok, fits)
				}
				if !ok {
					if wantOK && !cut {
						t.Fatalf("max %d size %d read %d: canReplay false", max, size, read)
					}
					p.finish()
					if src.closes.Load() != 1 {
						t.Fatalf("closes %d", src.closes.Load())
					}
					continue
				}
				r2, err := p.next()
				if err != nil {
					t.Fatalf("max %d size %d: next after canReplay: %v", max, size, err)
				}
				got2, err := review81ReadAll(t, r2, rnd, -1)
				if err != io.EOF {
					t.Fatalf("max %d size %d: second read ends %v", max, size, err)
				}
				if !bytes.Equal(got2, data) {
					t.Fatalf("max %d size %d cut %v read %d: replay of %d bytes differs from body", max, size, cut, read, len(got2))
				}
				if p.over && len(got2) > 0 {
					// over: sent whole only if no replay (got2 from the frontier)
				}
				r2.Close()
				p.finish()
				if src.closes.Load() != 1 || src.concurrent.Load() || src.afterClose.Load() {
					t.Fatalf("closes %d concurrent %v afterClose %v", src.closes.Load(), src.concurrent.Load(), src.afterClose.Load())
				}
			}
		}
	}
}

// Many goroutines at once: readers asked for, read, closed, canReplay,
// abort, finish; the source is never read concurrently or after Close,
// closed once, and every reader handed out sends the body's exact prefix.
func TestReview81ReplayConcurrent(t *testing.T) {
	rnd := rand.New(rand.NewPCG(811, uint64(time.Now().UnixNano())))
	afterClose := 0
	defer func() {
		t.Logf("a Read of the source began after its Close returned in %d of 100 iterations", afterClose)
	}()
	for iter := 0; iter < 100; iter++ {
		size := rnd.IntN(300000)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		src := &review81Src{data: data, rnd: rand.New(rand.NewPCG(uint64(iter), 1))}
		if rnd.IntN(5) == 0 {
			src.failAt = 1 + rnd.IntN(size+1)
		}
		p := &replay{src: src, max: int64(rnd.IntN(400000))}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var bad atomic.Value
		for g := 0; g < 8; g++ {
			seed := rnd.Uint64()
			wg.Go(func() {
				lr := rand.New(rand.NewPCG(seed, 2))
				for j := 0; j < 5; j++ {
					switch lr.IntN(3) {
					case 0:
						p.canReplay(ctx, lr.IntN(2) == 0)
					default:
						r, err := p.next()
						if err != nil {
							continue
						}
						var out []byte
						b := make([]byte, 1+lr.IntN(70000))
						for {
							n, err := r.Read(b[:1+lr.IntN(len(b))])
							out = append(out, b[:n]...)
							if err != nil || lr.IntN(40) == 0 {
								break
							}
						}
						if !bytes.Equal(out, data[:min(len(out), len(data))]) || len(out) > len(data) {
							bad.Store("a reader's bytes are not the body's prefix")
						}
						r.Close()
					}
				}
			})
		}
		if rnd.IntN(4) == 0 {
			d := time.Duration(rnd.IntN(200)) * time.Microsecond
			go func() { time.Sleep(d); cancel() }()
			stop := context.AfterFunc(ctx, p.abort)
			defer stop()
		}
		wg.Wait()
		p.finish()
		cancel()
		if v := bad.Load(); v != nil {
			t.Fatal(v)
		}
		// readAhead may still run: wait for it to close.
		deadline := time.Now().Add(2 * time.Second)
		for {
			p.mu.Lock()
			closed, live := p.closed, p.live
			p.mu.Unlock()
			if closed && live == 0 || time.Now().After(deadline) {
				if !closed || live != 0 {
					t.Fatalf("iter %d: closed %v live %d", iter, closed, live)
				}
				break
			}
			time.Sleep(time.Millisecond)
		}
		if c := src.closes.Load(); c != 1 || src.concurrent.Load() {
			t.Fatalf("iter %d: closes %d concurrent %v", iter, c, src.concurrent.Load())
		}
		if src.afterClose.Load() {
			afterClose++
		}
	}
}
