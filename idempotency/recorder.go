package idempotency

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// recorder passes a response through and keeps a copy of it, up to max
// bytes of body. A response that the handler neither flushes nor makes
// longer than net/http buffers before it sends anything (buffered), and
// whose length and framing net/http sets, is held until the handler
// returns: net/http would have sent nothing of it before either. So the
// middleware can send it whole, its length declared, before a save that a
// store slow to answer holds up (send).
type recorder struct {
	http.ResponseWriter
	max       int
	hold      bool   // nothing was passed to w yet: the status, headers and body are held
	pending   []byte // the body held
	head      bool   // the request is a HEAD: net/http sends no body
	h2        bool   // over HTTP/2, which buffers more before it sends the headers
	sniff     []byte // a HEAD's first bytes, kept when its body is over max
	status    int
	header    http.Header
	body      []byte
	truncated bool
	hijacked  bool
	flushed   bool            // some of the response was sent before the handler returned
	failed    bool            // a write to the client failed
	written   int64           // body bytes the handler wrote, kept or not
	client    context.Context // the request's: done once its client has gone
	began     bool            // the response began while its client was there
	outer     map[string]bool // headers set before the handler ran
}

// newRecorder returns a recorder of w's answer to r, noting the headers
// already set on w by outer middleware, keeping up to limit bytes of body.
func newRecorder(w http.ResponseWriter, r *http.Request, limit int) *recorder {
	rec := &recorder{ResponseWriter: w, client: r.Context(), max: limit, head: r.Method == http.MethodHead, h2: r.ProtoMajor == 2,
		outer: make(map[string]bool, len(w.Header())), hold: r.Method != http.MethodHead}
	for k := range w.Header() {
		rec.outer[k] = true
	}
	return rec
}

// Flush sends what was written so far, as an http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK) // as net/http does on a flush
	}
	r.flushed = true
	r.pass()
	err := http.NewResponseController(r.ResponseWriter).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		r.failed = true
	}
	return err
}

// Hijack hands over the connection, for http.ResponseController; the
// response cannot be replayed then.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.pass()
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return conn, rw, err
}

func (r *recorder) WriteHeader(status int) {
	if status < 100 || status > 999 {
		// As net/http panics, at once: a status held and stored would be
		// replayed, and panic, at every repeat for the record's TTL
		// (review149).
		panic(fmt.Sprintf("invalid WriteHeader code %v", status))
	}
	if status < http.StatusOK && status != http.StatusSwitchingProtocols {
		if r.status == 0 { // after the final status (held), net/http would drop it
			r.ResponseWriter.WriteHeader(status) // informational, such as 103 Early Hints
		}
		return
	}
	if r.status != 0 {
		return
	}
	r.status = status
	r.began = r.client.Err() == nil
	r.header = r.ResponseWriter.Header().Clone()
	if r.hold && holdable(status, r.header) {
		return
	}
	r.hold = false
	r.ResponseWriter.WriteHeader(status)
}

// holdable reports whether a response of status and header may be held:
// one whose length and framing net/http sets itself, which is then free to
// declare its length when it sends it.
func holdable(status int, h http.Header) bool {
	if status == http.StatusSwitchingProtocols {
		return false
	}
	for _, k := range []string{"Content-Length", "Transfer-Encoding", "Trailer", "Connection", "Upgrade"} {
		if _, ok := h[k]; ok {
			return false
		}
	}
	return true
}

// buffered is how much body net/http buffers before it sends a
// response's headers: nothing of a response shorter than that, not
// flushed, leaves before its handler returns.
func (r *recorder) buffered() int {
	if r.h2 {
		return 4096
	}
	return 2048
}

// pass sends what r holds, if anything, and passes the rest of the
// response through: the status, with the headers as they were when the
// handler wrote it (as net/http sends them), the body written so far, and
// then the trailers set since (http.TrailerPrefix), as the handler set
// them.
func (r *recorder) pass() {
	if !r.hold {
		return
	}
	r.hold = false
	if r.status == 0 {
		return
	}
	h := r.ResponseWriter.Header()
	var trailers http.Header
	for k, vs := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if trailers == nil {
				trailers = http.Header{}
			}
			trailers[k] = vs
		}
		delete(h, k)
	}
	for k, vs := range r.header {
		h[k] = vs
	}
	r.ResponseWriter.WriteHeader(r.status)
	if len(r.pending) > 0 {
		if _, err := r.ResponseWriter.Write(r.pending); err != nil && !errors.Is(err, http.ErrBodyNotAllowed) {
			r.failed = true
		}
	}
	r.pending = nil
	for k, vs := range trailers {
		h[k] = vs
	}
}

// send sends the response that r holds whole, its length declared and
// flushed, so that the client has all of it before the handler returns:
// over HTTP/1, with "Connection: close", since the connection stays busy
// until then. A response r no longer holds was sent in part already.
func (r *recorder) send() {
	if !r.hold || r.status == 0 {
		return
	}
	if bodyAllowed(r.status) {
		r.header.Set("Content-Length", strconv.Itoa(len(r.pending)))
	}
	if !r.h2 {
		r.header.Set("Connection", "close")
	}
	r.pass()
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.hold && (len(r.pending)+len(p) > r.buffered() || !bodyAllowed(r.status)) {
		r.pass() // longer than net/http holds, or a body where none is allowed: net/http's answer
	}
	if !r.truncated && bodyAllowed(r.status) {
		if len(r.body)+len(p) > r.max {
			if r.head { // the first bytes, for headHeader's guess of a Content-Type
				r.sniff = append(make([]byte, 0, sniffLen), r.body[:min(len(r.body), sniffLen)]...)
				r.sniff = append(r.sniff, p[:min(len(p), sniffLen-len(r.sniff))]...)
			}
			r.truncated = true
			r.body = nil
		} else {
			r.body = append(r.body, p...)
		}
	}
	if r.hold {
		r.pending = append(r.pending, p...)
		r.written += int64(len(p))
		return len(p), nil
	}
	n, err := r.ResponseWriter.Write(p)
	r.written += int64(n)
	if err != nil && !errors.Is(err, http.ErrBodyNotAllowed) { // a body to a 204 or 304: dropped, the answer whole
		r.failed = true
	}
	return n, err
}

// short reports whether the body written is shorter than the
// Content-Length the response declared: net/http then cuts the connection,
// and the client did not get it whole.
func (r *recorder) short() bool {
	if r.head || r.status == http.StatusNoContent || r.status == http.StatusNotModified {
		return false // no body is sent
	}
	cl := r.header.Get("Content-Length")
	if cl == "" {
		return false
	}
	n, err := strconv.ParseInt(cl, 10, 64)
	return err == nil && r.written < n
}

// sniffLen is how many bytes net/http reads to guess a Content-Type.
const sniffLen = 512

// headHeader adds to h, the header to store, for a HEAD whose body was
// over max, which is not kept: net/http sent none of it, but it set, from what
// the handler wrote, headers the handler did not, which a replay with no
// body would not get. A Content-Length, if the handler wrote something,
// did not flush, and wrote no more than net/http buffers before it sends
// the headers (2048 bytes, 4096 over HTTP/2); a Content-Type guessed from
// its first bytes. Neither with a Transfer-Encoding or a Trailer, for
// which net/http sets neither. A HEAD whose body fits is kept whole, and
// its replay makes net/http set the same.
func (r *recorder) headHeader(h http.Header) {
	// truncated: the status allowed a body (Write keeps none otherwise).
	if !r.head || !r.truncated || r.written == 0 || r.header.Get("Transfer-Encoding") != "" || r.header.Get("Trailer") != "" {
		return
	}
	if !r.flushed && r.written <= int64(r.buffered()) && r.header.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.FormatInt(r.written, 10))
	}
	if _, typed := r.header["Content-Type"]; !typed {
		h.Set("Content-Type", http.DetectContentType(r.sniff))
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// bodyAllowed reports whether a response of status has a body to keep.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && (status < 100 || status > 199)
}
