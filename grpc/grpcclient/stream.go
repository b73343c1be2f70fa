package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Stream is a grpc.StreamClientInterceptor that runs each stream through
// the pipeline, retrying it while it is uncommitted (see the package
// documentation). It returns once the first attempt's stream is open, or
// with an [*Error] when the call failed before any was. The stream it
// returns keeps grpc-go's rules: one goroutine may send while another
// receives, and the caller must read it to its end or cancel its
// context. Its Context commits it, as grpc-go's does. The pipeline's call
// ends with the stream, so the breaker and the listener hear how it ended
// (a failure after it committed is a failure, not retried, but for the end
// that the call's own deadline makes of a stream the server answered:
// see the package documentation), and a
// concurrency limit (pipeline.WithLimit) counts it in flight until then.
//
// Installed by hand, without [Interceptor.DialOptions], it needs
// grpc.WithDisableRetry() beside it, or grpc-go's retry policy retries
// each of its attempts too (see [Interceptor.Unary]).
func (ic *Interceptor) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, once := ic.prepare(ctx, method, opts, true)
	s := &stream{
		cfg:      ic.config(),
		ctx:      ctx,
		desc:     desc,
		cc:       cc,
		method:   method,
		streamer: streamer,
		replay:   len(once) == 0,
		changed:  make(chan struct{}),
	}
	s.opts, s.onFinish = callOptions(nil, nil, opts)
	if once == nil {
		once = sequential // attempts share the stream's state
	}
	go s.run(ctx, ic.pipelineFor(cc.Target(), method), once)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.cur == nil && s.final == nil {
		s.waitLocked()
	}
	if s.panicked != nil {
		panic(s.panicked)
	}
	if s.cur == nil {
		return nil, s.final
	}
	return s, nil
}

// stream is a client stream made of the attempts of one call. The
// pipeline's call runs on a goroutine of its own, in run: each of its
// attempts opens a stream, replays what the caller sent, hands it to the
// caller and then waits on its Header for the decision: headers came, so
// the stream is committed and the call succeeded; or the stream ended
// without them, and its status is the attempt's outcome. The caller's
// SendMsg, RecvMsg and the rest work on the current attempt and, when it
// fails uncommitted, wait for the next one or the call's end.
type stream struct {
	cfg      *config
	ctx      context.Context // the call's
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption // the caller's, but OnFinish
	onFinish []func(error)     // the caller's OnFinish, called once the call is done
	finished sync.Once
	replay   bool // the call may make more than one attempt
	// overflowed: the messages sent outgrew MaxReplayBuffer, which
	// committed the stream before its response began.
	overflowed atomic.Bool

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on each change of what follows
	n         int           // attempts opened
	cur       *attempt      // the attempt the caller works on; nil before the first is ready
	last      *attempt      // the last attempt opened
	committed bool          // cur is the call's stream for good
	final     error         // the call's error, when it failed before committing
	sent      []any         // copies of the messages sent, while not committed
	size      int           // their size
	closeSent bool          // the caller closed the sending side
	ended     bool          // the caller saw the end of the stream
	release   func()        // of the pipeline's call, once it returned
	panicked  any           // what the pipeline's call panicked with
}

// attempt is one stream of the call.
type attempt struct {
	s        *stream
	cs       grpc.ClientStream
	finished chan struct{} // closed once err is the stream's outcome
	once     sync.Once
	err      error     // the stream's status error, nil for OK
	failed   bool      // the call is done with this attempt: it failed
	sending  int       // SendMsg calls in flight on it
	sendErr  error     // an error of the caller's own, from SendMsg
	peer     peer.Peer // its server, if it had a stream to one: set before finish
	// notProto says RecvMsg was given a value that is not a proto message:
	// the codec's refusal of it is the caller's error. Set before the
	// RecvMsg that may finish the stream.
	notProto atomic.Bool
	got      atomic.Bool // a message came from its server
}

// of is what the classification of a's outcome needs to know of a.
func (a *attempt) of() attemptOf {
	at := attemptOf{reached: reached(&a.peer)}
	if a.notProto.Load() {
		at.reply = notProtoReply{}
	}
	return at
}

// notProtoReply stands for a reply value of the caller's that is not a
// proto message.
type notProtoReply struct{}

// finish records the outcome of the attempt's stream, once; grpc-go calls
// it through grpc.OnFinish, and RecvMsg when it sees the end first.
func (a *attempt) finish(err error) {
	first := false
	a.once.Do(func() {
		if err == io.EOF {
			err = nil
		}
		a.err = err
		close(a.finished)
		first = true
	})
	if first && a.s.committedTo(a) {
		a.s.done(a.err)
	}
}

// isFinished reports whether a's outcome is known.
func (a *attempt) isFinished() bool {
	select {
	case <-a.finished:
		return true
	default:
		return false
	}
}

// done calls the caller's OnFinish functions, once, with the call's
// error: its committed attempt's, or the call's own.
func (s *stream) done(err error) {
	s.finished.Do(func() {
		if err != nil {
			err = callError(err)
		}
		for _, f := range s.onFinish {
			f(err)
		}
	})
}

// broadcastLocked wakes whoever waits for a change.
func (s *stream) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitLocked waits for the next change, unlocking meanwhile.
func (s *stream) waitLocked() {
	ch := s.changed
	s.mu.Unlock()
	<-ch
	s.mu.Lock()
}

// run makes the pipeline's call. A panic in it is handed to the
// caller's goroutines, which panic with it when they next wait on the
// stream.
func (s *stream) run(ctx context.Context, p *pipeline.Pipeline, once []pipeline.CallOption) {
	returned := false
	defer func() {
		if returned {
			return
		}
		r := recover()
		if r == nil {
			r = "grpcclient: runtime.Goexit in a stream's attempt"
		}
		s.done(errAbandoned)
		s.mu.Lock()
		s.panicked = r
		s.final = callError(errors.New("grpcclient: a stream's attempt panicked"))
		s.broadcastLocked()
		s.mu.Unlock()
	}()
	_, release, err := pipeline.DoStream(ctx, p, s.open, once...)
	returned = true
	s.mu.Lock()
	failed := err != nil && !s.committed // else err is the committed stream's, which the caller gets from grpc-go
	s.mu.Unlock()
	if failed {
		s.done(err) // before the caller can see the call's end
	}
	s.mu.Lock()
	s.release = release
	if failed {
		s.final = callError(err)
		s.ended = true // nothing left to read
	} else {
		s.committed = true
	}
	ended := s.ended
	a := s.cur
	s.broadcastLocked()
	s.mu.Unlock()
	if !failed && a != nil && a.isFinished() {
		s.done(a.err) // it ended before the call committed it
	}
	if ended {
		release()
	}
}

// outcome waits for the end of a, the call's committed stream, and
// returns its outcome for the pipeline's call, which lasts until then, so
// that the breaker and the listener hear how the stream ended, not only
// that it began: its status error, classified, but never retried (a
// transient error is terminal: a failure all the same; a pending one
// permanent: an answer). A stream that
// failed before its response began, committed only because its messages
// overflowed the replay buffer, also matches [ErrReplayBufferFull].
func (s *stream) outcome(ctx context.Context, a *attempt) error {
	<-a.finished
	if a.err == nil {
		return nil
	}
	s.mu.Lock()
	for a.sending > 0 {
		s.waitLocked()
	}
	sendErr := a.sendErr // a SendMsg of the caller's after the end may set it (review171)
	s.mu.Unlock()
	return s.outcomeOf(ctx, a, sendErr)
}

// outcomeOf is outcome once a, the attempt of ctx, has ended and no
// SendMsg is in flight on it; sendErr is a's as it ended.
func (s *stream) outcomeOf(ctx context.Context, a *attempt, sendErr error) error {
	if a.err == nil {
		return nil
	}
	if sendErr != nil {
		return resilience.Rejected(a.err) // the stream ended on the caller's own SendMsg error
	}
	err := s.cfg.classify(a.err, a.cs.Trailer(), a.of())
	md, _ := a.cs.Header()
	if cause := endedBy(ctx, a.err); a.got.Load() && cause != nil && cause != pipeline.ErrAttemptTimeout {
		// The server sent a message, and the call's own deadline ended
		// the stream, as it ends a watch: the caller's doing. (Headers
		// alone are no such evidence: a server may send them and hang.)
		return resilience.Rejected(err)
	}
	switch resilience.Classify(err) {
	case resilience.ClassPending: // not retried: an answer all the same, not a failure
		err = resilience.Permanent(err)
	case resilience.ClassTransient:
		if md == nil && s.overflowed.Load() {
			// A retry would have fixed it, had the stream been kept to
			// replay: the pipeline's listener hears EventNotRetried.
			return resilience.Unrepeatable(fmt.Errorf("%w (%w)", err, ErrReplayBufferFull))
		}
		err = resilience.Terminal(err)
	}
	return err
}

// open is the pipeline's operation: one attempt, from opening its stream
// to the decision. Its error matches pipeline.ErrAttemptTimeout when the
// attempt timeout ended the stream, as a unary call's does.
func (s *stream) open(ctx context.Context) (_ struct{}, err error) {
	defer func() { err = timedOut(ctx, err) }()
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if n > 1 {
		ctx = withPreviousAttempts(ctx, n-1)
	}
	a := &attempt{s: s, finished: make(chan struct{}), peer: unreached}
	opts := append(s.opts[:len(s.opts):len(s.opts)], grpc.Peer(&a.peer), grpc.OnFinish(a.finish))
	cs, err := s.streamer(ctx, s.desc, s.cc, s.method, opts...)
	if err != nil {
		return struct{}{}, s.cfg.classify(err, nil, a.of())
	}
	a.cs = cs
	s.mu.Lock()
	s.last = a
	s.mu.Unlock()
	s.replayTo(a)
	if md, _ := cs.Header(); md != nil {
		s.commit(a) // the response has begun
		return struct{}{}, s.outcome(ctx, a)
	}
	<-a.finished // the stream ended without headers: its status decides
	s.mu.Lock()
	defer s.mu.Unlock()
	for a.sending > 0 { // a SendMsg of the caller's may have caused it
		s.waitLocked()
	}
	switch {
	case s.committed: // by the caller meanwhile
		s.cur = a
		return struct{}{}, s.outcomeOf(ctx, a, a.sendErr)
	case a.sendErr != nil: // the caller's own error, such as a message too large
		a.failed = true
		s.broadcastLocked()
		return struct{}{}, resilience.Rejected(a.sendErr) // not sent: neither retried nor counted
	case a.err == nil: // OK without headers or messages: done, successfully
		s.commitLocked(a)
		return struct{}{}, nil
	}
	a.failed = true
	s.broadcastLocked()
	return struct{}{}, s.cfg.classify(a.err, cs.Trailer(), a.of())
}

// replayTo sends a the messages sent so far, and the close of the
// sending side if the caller closed it, then makes it the caller's. A
// send that fails stops it: the stream's status tells why.
func (s *stream) replayTo(a *attempt) {
	for i := 0; ; i++ {
		s.mu.Lock()
		if i == len(s.sent) {
			closeSent := s.closeSent
			s.cur = a
			s.broadcastLocked()
			s.mu.Unlock()
			if closeSent {
				_ = a.cs.CloseSend()
			}
			return
		}
		m := s.sent[i]
		s.mu.Unlock()
		if err := a.cs.SendMsg(m); err != nil {
			return
		}
	}
}

// commit makes a the call's stream for good.
func (s *stream) commit(a *attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitLocked(a)
}

func (s *stream) commitLocked(a *attempt) {
	s.committed = true
	s.cur = a
	s.sent, s.size = nil, 0
	s.broadcastLocked()
}

// current returns the attempt for the caller to work on: the committed
// one, or the current one while it has not failed; or the call's error.
func (s *stream) current() (*attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.currentLocked()
}

func (s *stream) currentLocked() (*attempt, error) {
	for {
		switch a := s.cur; {
		case s.panicked != nil:
			panic(s.panicked)
		case s.final != nil:
			return nil, s.final
		case a != nil && (s.committed || !a.failed):
			return a, nil
		}
		s.waitLocked()
	}
}

// end releases the call once the caller has seen the end of its stream.
func (s *stream) end() {
	s.mu.Lock()
	s.ended = true
	release := s.release
	s.mu.Unlock()
	if release != nil {
		release()
	}
}

// SendMsg sends m on the current attempt, keeping a copy to replay while
// the stream is uncommitted. When the attempt has failed uncommitted it
// returns nil (the next attempt replays m) or, when the call has failed,
// io.EOF, the call's status coming from RecvMsg.
func (s *stream) SendMsg(m any) error {
	a, committed, err := s.startSend(m)
	if err != nil {
		return io.EOF
	}
	err = a.cs.SendMsg(m)
	s.mu.Lock()
	a.sending--
	if err != nil && err != io.EOF {
		a.sendErr = err // the caller's own: grpc-go ends the stream with it
	}
	s.broadcastLocked()
	s.mu.Unlock()
	switch {
	case err == nil || committed:
		if err != nil && err != io.EOF {
			s.end()
		}
		return err
	case err != io.EOF: // the caller's own error: the call ends with it
		return err
	}
	return nil // the stream broke: retried, m replayed, or the call's error comes from RecvMsg
}

// startSend returns the attempt to send m on, and whether the stream is
// committed, keeping a copy of m if it is not.
func (s *stream) startSend(m any) (a *attempt, committed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err = s.currentLocked()
	if err != nil {
		return nil, false, err
	}
	if !s.committed && s.replay {
		s.keepLocked(m)
	}
	a.sending++
	return a, s.committed, nil
}

// keepLocked keeps a copy of m for a replay, or commits the stream when it
// cannot: m is not a proto message, or the buffer would hold more than
// MaxReplayBuffer bytes.
func (s *stream) keepLocked(m any) {
	pm, ok := m.(proto.Message)
	if !ok {
		s.commitLocked(s.cur)
		return
	}
	size := proto.Size(pm)
	if s.size+size > s.cfg.maxReplay {
		s.overflowed.Store(true)
		s.commitLocked(s.cur)
		return
	}
	s.size += size
	s.sent = append(s.sent, proto.Clone(pm))
}

// RecvMsg receives a message from the current attempt. An error of an
// uncommitted attempt waits for the call's decision: a retry, received
// from; the stream committed after all, the error returned as it is; or
// the call's error.
func (s *stream) RecvMsg(m any) error {
	for {
		a, err := s.current()
		if err != nil {
			return err
		}
		if _, ok := m.(proto.Message); !ok && !a.notProto.Load() {
			a.notProto.Store(true)
		}
		rerr := a.cs.RecvMsg(m)
		if rerr == nil {
			a.got.Store(true)
			s.received(a)
			return nil
		}
		a.finish(rerr)
		s.mu.Lock()
		for !a.failed && !s.committed && s.final == nil {
			s.waitLocked()
		}
		committed := s.committed && s.cur == a
		s.mu.Unlock()
		if committed {
			s.callOver(a)
			return s.committedError(a, rerr)
		}
	}
}

// committedError returns rerr, the error that ended a, the call's
// committed stream, as grpc-go gave it, but for a failure whose trailer
// says not to retry (a pushback of -1, malformed or repeated): an [*Error]
// of class terminal with rerr's status, so that a server of the caller's
// (package grpcsignal) passes the signal on.
func (s *stream) committedError(a *attempt, rerr error) error {
	trailer := a.cs.Trailer()
	if _, retry, ok := grpcsignal.Pushback(trailer); !ok || retry {
		return rerr
	}
	if err := s.cfg.classify(rerr, trailer, a.of()); resilience.Classify(err) == resilience.ClassTerminal {
		return callError(err)
	}
	return rerr
}

// received commits the stream to a, from which a message came. A call
// whose response is one message has then ended (grpc-go read its status
// too): its OnFinish runs and it is released before the caller sees it.
func (s *stream) received(a *attempt) {
	s.mu.Lock()
	if !s.committed {
		s.commitLocked(a)
	}
	s.mu.Unlock()
	if !s.desc.ServerStreams && a.isFinished() {
		s.callOver(a)
	}
}

// callOver ends the call whose stream a has ended, before the caller sees
// its end: it waits for the pipeline's call to return (its events are all
// out then), runs the caller's OnFinish, as grpc-go does before RecvMsg
// returns, and releases the call.
func (s *stream) callOver(a *attempt) {
	s.mu.Lock()
	for s.release == nil && s.final == nil && s.panicked == nil {
		s.waitLocked()
	}
	s.mu.Unlock()
	s.done(a.err)
	s.end()
}

// Header returns the response's header once the stream is committed,
// waiting through retries; nil when the call failed, whose error comes
// from RecvMsg, as grpc-go does.
func (s *stream) Header() (metadata.MD, error) {
	s.mu.Lock()
	for !s.committed && s.final == nil {
		s.waitLocked()
	}
	a := s.cur
	s.mu.Unlock()
	if !s.committedTo(a) {
		return nil, nil
	}
	return a.cs.Header()
}

func (s *stream) committedTo(a *attempt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed && a != nil && s.cur == a
}

// Trailer returns the trailer of the call's last attempt.
func (s *stream) Trailer() metadata.MD {
	s.mu.Lock()
	a := s.cur
	if s.final != nil {
		a = s.last
	}
	s.mu.Unlock()
	if a == nil || a.cs == nil {
		return nil
	}
	return a.cs.Trailer()
}

// CloseSend closes the sending side of the current attempt, and of every
// later one.
func (s *stream) CloseSend() error {
	s.mu.Lock()
	s.closeSent = true
	a := s.cur
	ok := a != nil && (s.committed || !a.failed)
	s.mu.Unlock()
	if ok {
		return a.cs.CloseSend()
	}
	return nil
}

// Context commits the stream, as grpc-go's does, and returns its
// context; between attempts it returns the call's context and commits
// nothing. It never waits.
func (s *stream) Context() context.Context {
	s.mu.Lock()
	a := s.cur
	switch {
	case s.final != nil:
		a = s.last
	case a == nil || (!s.committed && a.failed):
		s.mu.Unlock()
		return s.ctx
	case !s.committed:
		s.commitLocked(a)
	}
	s.mu.Unlock()
	if a == nil || a.cs == nil {
		return s.ctx
	}
	return a.cs.Context()
}
