package httpclient

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"sync"
	"time"
)

// replay sends a request body of unknown length that has no GetBody as it
// is read, as net/http sends it, and keeps what the attempts read of it,
// up to max bytes, so that a later attempt can send it again. It reads
// ahead of no attempt: such a body may be a stream that waits for the
// answer (full duplex), which a read ahead would hold up for good. Only
// once an attempt's upload was cut does it read the rest, for a moment
// (canReplay).
//
// One reader at a time reads the caller's body (its frontier); another
// attempt gets a reader only if none is at the frontier: when the body
// was read to its end (then any number replay what was kept), or when
// every reader handed out was closed and no read is under way. The
// caller's body is closed once the request has returned and every reader
// has been closed: a base may still be sending it after RoundTrip returns.
type replay struct {
	mu      sync.Mutex
	src     io.ReadCloser
	max     int64
	kept    [][]byte      // the first bytes read, while no more than max were (see chunk)
	nkept   int64         // bytes in kept
	read    int64         // bytes read from src
	over    bool          // more than max were read: kept is dropped
	end     error         // src's io.EOF, or its read error, once read (see failed)
	reading bool          // a Read of src is under way
	live    int           // readers handed out and not closed
	ahead   bool          // one of them is readAhead's, not a base's
	done    bool          // the request returned
	closed  bool          // src was closed
	changed chan struct{} // closed at the next read's end or reader's close, if waited on
}

// errBodyBusy is the error of a reader asked for while the body cannot be
// sent again whole.
var errBodyBusy = errors.New("httpclient: the request body is still being sent, or was longer than MaxBufferedBody")

// next is the GetBody of an attempt.
func (p *replay) next() (io.ReadCloser, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.replayable() {
		return nil, errBodyBusy
	}
	p.live++
	return &replayReader{p: p}, nil
}

// canReplay reports whether another attempt could send the whole body,
// waiting up to DrainTimeout, while ctx lasts, for the base to be done
// with a reader: net/http may still be ending a body's write (one it did
// not send, for a 100-continue answered otherwise) as RoundTrip returns.
// After an upload the server cut (cut is true), the rest is read too, in
// the same time: a body longer than max, or one that does not end by then
// (a stream, perhaps waiting for the answer), is not sent again. A server
// refusing an upload over its limit cuts it at every attempt (nginx, a
// chunked body), so that only the length tells such a refusal, which a
// body sent once gets (see cutRequest), from a server that died mid-upload
// and came back, whose retry goes through.
func (p *replay) canReplay(ctx context.Context, cut bool) bool {
	var t *time.Timer
	ahead := false
	for {
		p.mu.Lock()
		if p.over || p.closed || p.failed() {
			p.mu.Unlock()
			return false
		}
		if p.replayable() && (!cut || p.end != nil) {
			p.mu.Unlock()
			return true
		}
		if p.replayable() && !ahead { // cut, and not read to its end: read the rest
			ahead, p.ahead = true, true
			p.live++
			go p.readAhead(&replayReader{p: p, off: p.read})
		}
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		ch := p.changed
		p.mu.Unlock()
		if t == nil {
			t = time.NewTimer(DrainTimeout)
			defer t.Stop()
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// readAhead reads the rest of the body through r, keeping it up to max,
// and closes r. A read that blocks for good ends with the request, which
// closes src.
func (p *replay) readAhead(r *replayReader) {
	var b [32 << 10]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			break
		}
		p.mu.Lock()
		over := p.over
		p.mu.Unlock()
		if over {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead = false
	r.closeLocked() // with ahead, at once: finish must not see this reader live and not ahead
}

// signal wakes canReplay; p.mu is held.
func (p *replay) signal() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// replayable reports whether a new reader could send the whole body now,
// waiting for nothing; p.mu is held.
func (p *replay) replayable() bool {
	return !p.over && !p.reading && !p.closed && !p.failed() && (p.end != nil || p.live == 0)
}

// failed reports whether src failed to read: what was kept is not the
// whole body, and a retry would send a part of it; p.mu is held.
func (p *replay) failed() bool { return p.end != nil && p.end != io.EOF }

// chunk returns the index of the chunk of kept that holds byte off, and
// off's place in it. Chunk k holds 4 KiB << k bytes, so that a long body
// is kept without copying what was kept already (a slice grown by append
// copies it again at each growth: 8 MiB took longer than DrainTimeout to
// read ahead), and at most twice its length is allocated.
func chunk(off int64) (k int, at int64) {
	k = bits.Len64(uint64(off)/keepFirst+1) - 1
	return k, off - keepFirst*(1<<k-1)
}

// keepFirst is the length of kept's first chunk.
const keepFirst = 4 << 10

// keep appends b to kept; p.mu is held. The first chunk grows as a
// slice does, so that a short body takes no more than its length.
func (p *replay) keep(b []byte) {
	for len(b) > 0 {
		k, at := chunk(p.nkept)
		if k == len(p.kept) {
			var c []byte
			if k > 0 {
				c = make([]byte, 0, keepFirst<<k)
			}
			p.kept = append(p.kept, c)
		}
		n := min(int64(len(b)), keepFirst<<k-at)
		p.kept[k] = append(p.kept[k], b[:n]...)
		p.nkept += n
		b = b[n:]
	}
}

// finish is called as the request returns.
func (p *replay) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	p.closeIfUnused()
}

// abort closes src as the caller's context ends: a body whose Read
// blocks (a stream waiting for more to send) would otherwise hold the
// attempt's write, and the request, for good, as it holds net/http's.
func (p *replay) abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		_ = p.src.Close()
	}
	p.signal()
}

// closeIfUnused closes src once the request returned and no base's
// reader is live; p.mu is held. A Read of src may still be under way, on
// a base's goroutine that closed its reader to stop it, or on readAhead's:
// closing src stops it, as net/http's closing the caller's body would.
func (p *replay) closeIfUnused() {
	bases := p.live
	if p.ahead {
		bases--
	}
	if p.done && bases == 0 && !p.closed {
		p.closed = true
		_ = p.src.Close()
	}
}

// replayReader is one attempt's body: what was kept, then the frontier.
type replayReader struct {
	p      *replay
	off    int64
	closed bool
}

func (r *replayReader) Read(b []byte) (int, error) {
	p := r.p
	p.mu.Lock()
	if r.off < p.nkept && !p.over {
		k, at := chunk(r.off)
		n := copy(b, p.kept[k][at:])
		r.off += int64(n)
		p.mu.Unlock()
		return n, nil
	}
	if r.off == p.read && p.end != nil {
		p.mu.Unlock()
		return 0, p.end
	}
	if r.closed || r.off != p.read || p.reading || p.closed {
		p.mu.Unlock()
		return 0, errBodyBusy // not with one reader at the frontier, as next hands them out
	}
	p.reading = true
	p.mu.Unlock()
	n, err := p.src.Read(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading = false
	if !p.over {
		if p.nkept+int64(n) > p.max {
			p.over, p.kept, p.nkept = true, nil, 0
		} else {
			p.keep(b[:n])
		}
	}
	p.read += int64(n)
	r.off += int64(n)
	if err != nil {
		p.end = err
	}
	p.signal()
	return n, err
}

func (r *replayReader) Close() error {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.closeLocked()
	return nil
}

// closeLocked closes r; r.p.mu is held.
func (r *replayReader) closeLocked() {
	if !r.closed {
		r.closed = true
		r.p.live--
		r.p.closeIfUnused()
		r.p.signal()
	}
}
