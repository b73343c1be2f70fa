package httpclient

import (
	"context"
	"errors"
	"io"
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
	kept    []byte        // the first bytes read, while no more than max were
	read    int64         // bytes read from src
	over    bool          // more than max were read: kept is dropped
	end     error         // src's io.EOF, or its read error, once read
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
		if p.over || p.closed {
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
	p.ahead = false
	p.mu.Unlock()
	_ = r.Close()
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
	return !p.over && !p.reading && !p.closed && (p.end != nil || p.live == 0)
}

// finish is called as the request returns.
func (p *replay) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	p.closeIfUnused()
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
	if r.off < int64(len(p.kept)) && !p.over {
		n := copy(b, p.kept[r.off:])
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
		if int64(len(p.kept)+n) > p.max {
			p.over, p.kept = true, nil
		} else {
			p.kept = append(p.kept, b[:n]...)
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
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !r.closed {
		r.closed = true
		p.live--
		p.closeIfUnused()
		p.signal()
	}
	return nil
}
