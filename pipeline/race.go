package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// race is one attempt of the retry stage with hedges. The first attempt
// runs on the caller's goroutine; if it has not answered the hedging delay
// after it was sent, the pipeline's timer (hedgeTimers) sends a hedge, on a goroutine of its own, and
// another each delay after, up to the policy's limit. The first success
// (or answer not to retry) wins and the others are canceled. Until a hedge
// is sent, a race makes no goroutine, timer or channel: it waits in the
// pipeline's one timer.
//
// A hedge that wins while the first attempt runs cancels it, and the
// caller returns the winner's answer once the first attempt has returned:
// an operation that ignores its context's cancellation holds the answer
// until it does.
//
// A call allocates its state with its first race (hedged), within 512
// bytes, the largest objects the allocator and the collector handle
// without a header, hence the narrow counts; a call that sent no hedge
// leaves them, zeroed, to the pipeline's next call (spareHedged), and
// such a call allocates only its first attempt's context (64 bytes).
// The timing of hedges does not depend on it.
type race[T any] struct {
	c        call[T] // a copy: each attempt runs a copy of it with its own keeper
	ctx      context.Context
	delay    time.Duration
	first    keeper
	cutter   atomic.Pointer[keeper] // the hedge that cut the first attempt short: the race's answer
	firstCtx *lazyCtx               // allocated with r, unless r is reused (spareHedged): its operation may keep it
	phase    atomic.Int32           // running, returned or cut: whether a hedge won while the first attempt ran
	decided  atomic.Bool            // an attempt failed with an error not retried: no more hedges
	hedgeOK  atomic.Bool            // a hedge's operation returned a success: its outcome is on its way
	sent     atomic.Int32           // hedges sent, that the operation did not refuse (see Hedged); sendsClosed once the race returned
	over     bool                   // no more hedges; under mu
	have     bool                   // last is set
	alone    bool                   // no hedge was or will be sent: no other goroutine has seen r's call

	mu      sync.Mutex      // between the caller and the timer, which sends the hedges
	extra   int32           // most hedges (the policy's, up to math.MaxInt32)
	running int32           // hedges sent whose outcome is not yet taken
	due     hedgeDue        // in the pipeline's hedgeTimers while a hedge is due; the attempts sent
	timer   *time.Timer     // instead, in a testing/synctest bubble
	results chan outcome[T] // made with the first hedge
	keepers *[]*keeper      // the hedges', made with the first (r stays within a spare's size)

	last    outcome[T] // the answer to return if no attempt wins; the caller's
	refused error      // the first attempt's refusal by the breaker as it was about to be sent (call.refused)
}

// The phases of a race's first attempt: it runs, it has returned, or a
// hedge won while it ran and canceled it.
const (
	firstRunning int32 = iota
	firstReturned
	firstCut
	firstWon // it, or a hedge after it returned, returned a success: hedges still queued at the gates are not sent
)

// maxWaitingOutcomes is the most outcomes of a race's hedges that wait,
// sent, for the caller to take them.
const maxWaitingOutcomes = 8

// outcome is how one attempt of a race ended.
type outcome[T any] struct {
	res      T
	err      error
	keep     *keeper
	panicked any  // what the attempt panicked with
	goexit   bool // the attempt called runtime.Goexit
	late     bool // it failed once the race's context had ended: its error is no answer of the dependency's
}

func newRace[T any](c *call[T], ctx context.Context, delay time.Duration) *race[T] {
	extra := int32(min(c.p.cfg.hedge.Extra(), math.MaxInt32))
	r := c.race
	if r != nil { // the call's first race: a call counts once for MaxShare, whatever its attempts
		c.p.cfg.hedge.Called()
	} else {
		m := new(struct {
			r   race[T]
			ctx lazyCtx
		}) // not reused: the first attempt's context with it
		r, m.r.firstCtx = &m.r, &m.ctx
	}
	c.race = nil                                         // the next race's is its own
	r.c, r.ctx, r.delay, r.extra = *c, ctx, delay, extra // into zeroed memory: no copy of the rest
	c.spare = nil                                        // the race's first attempt's, not a later race's
	return r
}

// run runs the race and returns the winner's answer, or the last
// failure's (the one with the longest retry-after hint).
func (r *race[T]) run() (T, error) {
	o := r.runFirst()
	if r.alone = r.disarm(); r.alone {
		r.keep(o)
		return o.res, o.err
	}
	r.mu.Lock()
	hedged := r.running > 0
	if !hedged {
		r.stop()
	}
	r.mu.Unlock()
	if !hedged {
		r.keep(o)
		return o.res, o.err
	}
	return r.finish(o)
}

// disarm reports whether r sent no hedge and will send none, taken off the
// pipeline's timer before its delay ran out: then the timer's fire, which
// alone sends hedges, never sees r.
func (r *race[T]) disarm() bool { return r.c.p.cfg.hedgeTimers.disarm(&r.due) }

// runFirst runs the first attempt on the caller's goroutine. If it panics
// or calls runtime.Goexit, the hedges out are canceled first.
func (r *race[T]) runFirst() (o outcome[T]) {
	if r.firstCtx == nil { // r may be reused: the context its operation may keep is apart
		r.firstCtx = new(lazyCtx)
	}
	r.firstCtx.Context = r.ctx // zeroed memory, as above
	r.first.own = r.firstCtx
	a := r.c
	a.k = &r.first
	r.c.spare = nil // the first attempt's, not the hedges'
	returned := false
	defer func() {
		if !returned {
			r.abandon(nil)
			r.first.release()
		}
	}()
	o.res, o.err = a.attempt(r.firstCtx, false, r)
	o.late = o.err != nil && ended(r.ctx)
	r.refused = a.refused
	o.keep = &r.first
	returned = true
	r.phase.CompareAndSwap(firstRunning, firstReturned)
	return o
}

// arm starts the hedging delay, as the first attempt is sent: not from a
// wait for a slot of the concurrency limit, nor while the tracer starts
// the attempt's span. No other goroutine sees r
// before the pipeline's timer, under its own lock, does: r.mu is taken for
// a timer of r's own only.
func (r *race[T]) arm() (now monotime.Reading) {
	r.due.sent, r.due.race = 1, r
	now = r.c.p.cfg.hedgeTimers.now()
	if r.c.p.cfg.hedgeTimers.addAt(&r.due, now, r.delay) {
		return now
	}
	r.mu.Lock()
	r.ownTimer()
	r.mu.Unlock()
	return now
}

// after sets r's next hedge due one delay from now: in the pipeline's
// timer, or in a testing/synctest bubble, in one of r's own; r.mu is held.
func (r *race[T]) after() {
	if !r.c.p.cfg.hedgeTimers.add(&r.due, r.delay) {
		r.ownTimer()
	}
}

// ownTimer sets r's own timer for its next hedge, in a testing/synctest
// bubble; r.mu is held.
func (r *race[T]) ownTimer() {
	if r.timer == nil {
		r.timer = time.AfterFunc(r.delay, r.fire)
	} else {
		r.timer.Reset(r.delay)
	}
}

// returned tells r that an attempt of its (a hedge if hedge) returned
// err. An error not to retry decides the race, before the attempt's slot
// is given back (attemptEnded): no hedge queued for it is sent. Once the
// first attempt returned, a hedge that ends cannot cut it, whatever the
// gates and the tracer take to hear of it, and one not yet sent will not
// be if it won.
func (r *race[T]) returned(hedge bool, err error) {
	if err != nil && !retryable(err) {
		r.decided.Store(true)
	}
	switch {
	case !hedge:
		phase := firstReturned
		if err == nil {
			phase = firstWon
		}
		r.phase.CompareAndSwap(firstRunning, phase)
	case err == nil:
		// A hedge's success: the race's answer if the first attempt
		// fails, which the caller waits for even if its context ends
		// before the hedge's span has ended and its slot gone back
		// (review156, review157: such a success was discarded).
		r.hedgeOK.Store(true)
		r.phase.CompareAndSwap(firstReturned, firstWon)
	}
}

// keepHedge adds hk to the keepers of r's hedges; r.mu is held.
func (r *race[T]) keepHedge(hk *keeper) {
	if r.keepers == nil {
		r.keepers = new([]*keeper)
	}
	*r.keepers = append(*r.keepers, hk)
}

// stopHedges sends no more hedges, and reports whether any is still out.
func (r *race[T]) stopHedges() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stop()
	return r.running > 0
}

// stop sends no more hedges; r.mu is held.
func (r *race[T]) stop() {
	r.over = true
	r.c.p.cfg.hedgeTimers.remove(&r.due)
	if r.timer != nil {
		r.timer.Stop()
	}
}

// finish takes the first attempt's outcome and then the hedges', until one
// wins or none is left.
func (r *race[T]) finish(first outcome[T]) (T, error) {
	cut := r.phase.Load() == firstCut
	if cut {
		r.dispose(first) // canceled by a hedge that won: a loser
	} else if r.settle(first) {
		return r.result()
	}
	for {
		r.mu.Lock()
		if r.running == 0 {
			r.stop()
			r.mu.Unlock()
			break
		}
		results := r.results
		r.mu.Unlock()
		o, ok := r.next(results, cut)
		if !ok {
			r.abandon(nil)
			if r.last.late { // no answer of the dependency's: the context's end, as the hedges out would say (review133)
				r.last.err = r.ctx.Err()
			}
			break
		}
		if cut && o.keep != r.cutter.Load() {
			// The hedge that cut the first attempt short has yet to come,
			// and is the answer: the others' outcomes are losers', those
			// that cutHedges canceled, and a success that came first
			// (review119: it was returned, its context canceled).
			r.dispose(o)
			continue
		}
		if r.settle(o) {
			return r.result()
		}
	}
	r.keep(r.last)
	return r.result()
}

// next takes the outcome of a hedge out, r.mu not held, and reports
// true; or, once the race's context has ended and none has come, reports
// false: the caller hung up, or the budget ran out, and the race is to
// abandon the hedges out, so that an operation that does not heed its
// context holds no more than its own goroutine, as when the first
// attempt wins (review154: the call returned when a hedge that ignored
// its context did, 1 s past a 50 ms budget). While the first attempt is
// cut short by a hedge that won (cut), it waits for that hedge, which has
// returned, whatever the context.
func (r *race[T]) next(results chan outcome[T], cut bool) (o outcome[T], ok bool) {
	if cut {
		o = <-results
	} else {
		select {
		case o = <-results:
		case <-r.ctx.Done():
			select {
			case o = <-results: // come as the context ended: taken first
			default:
				if !r.hedgeOK.Load() { // set before any hedge's firstWon: the first attempt's would have ended the race
					return o, false
				}
				o = <-results // a hedge's success, on its way (returned)
			}
		}
	}
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	return o, true
}

// result returns r.last, the race's context ended since an attempt failed
// before it (a hedge canceled as the caller hung up, or cut at the
// deadline) with that failure as its answer (retrypolicy.Error.Answer):
// the retry loop takes no error for one once the context has ended.
func (r *race[T]) result() (T, error) {
	if !r.last.late && r.last.err != nil && ended(r.ctx) {
		if a := r.last.answer(); a != nil {
			return r.last.res, &answered{r.last.err, a}
		}
	}
	return r.last.res, r.last.err
}

// lateAnswer gives o, which failed once the race's context had ended and
// is no answer itself, the answer before it, if any: r.last's, or, if o
// decides the race (not again), that of the hedges that have ended and
// wait to be taken.
func (r *race[T]) lateAnswer(o *outcome[T], again bool) {
	var a error
	if r.have {
		a = r.last.answer()
	}
	if a == nil && !again {
		a = r.queuedAnswer()
	}
	if a != nil {
		o.err = &answered{o.err, a}
	}
}

// queuedAnswer takes the outcomes of the hedges that have ended and wait
// to be taken, not waiting for the others, and returns the latest answer
// among them; nil if none. The outcomes are losers': the race is decided.
func (r *race[T]) queuedAnswer() (answer error) {
	for {
		r.mu.Lock()
		if r.running == 0 {
			r.mu.Unlock()
			return answer
		}
		select {
		case q := <-r.results:
			r.running--
			r.mu.Unlock()
			if a := q.answer(); a != nil || q.err == nil && q.panicked == nil && !q.goexit {
				answer = a // the latest: a success says the dependency answers
			}
			r.dispose(q)
		default:
			r.mu.Unlock()
			return answer
		}
	}
}

// answer returns the dependency's failure that o stands for: its error,
// returned before the race's context ended, or the one before it; nil if
// none.
func (o *outcome[T]) answer() error {
	if a, ok := o.err.(*answered); ok {
		return a.answer
	}
	if o.err == nil || o.late || ofClass(o.err, resilience.ClassCanceled) || ofClass(o.err, resilience.ClassRejected) {
		return nil
	}
	return o.err
}

// ended reports whether ctx has ended: canceled, or its deadline passed
// by the clock, whether or not ctx has heard of it yet.
func ended(ctx context.Context) bool { return ctx.Err() != nil || deadlinePassed(ctx) }

// fire sends a hedge, on the timer's goroutine, unless the race has sent
// all it may, is over, the call is over, the breaker has opened or the
// hedging policy's budget is spent; and sets the timer for the next. A
// first attempt that failed (to retry) while a hedge is out does not stop
// the next: the race waits for the hedge out, which the next hedges twin
// (review4_lost_test.go).
func (r *race[T]) fire() {
	c := &r.c
	r.mu.Lock()
	// A first attempt that failed with no twin out is its call's answer,
	// for the retry stage to judge, not a hedge's to undo: the timer may
	// fire as the caller ends its span or gives back its slot (review154:
	// a hedge sent after such a failure was a retry no MaxAttempts,
	// quota or backoff saw).
	if phase := r.phase.Load(); r.over || phase == firstCut || phase == firstWon || r.failedAlone(0) ||
		r.decided.Load() || r.due.sent > r.extra || r.ctx.Err() != nil ||
		passed(r.ctx) || c.b.Check() != nil || !c.p.cfg.hedge.Take() {
		r.mu.Unlock()
		return
	}
	r.due.sent++
	r.launch(r.due.sent)
	if r.due.sent <= r.extra {
		r.after()
	}
	r.mu.Unlock()
}

// passed reports whether ctx's deadline has passed by the clock, which its
// Err may not say yet: the timer that ends it runs late on a busy machine.
func passed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// launch starts hedge n (the race's n-th attempt) on a goroutine of its
// own, which tells the listener once the gates have let it through: a
// slow listener holds up its own hedge, not the timer, which other calls'
// hedges wait for; r.mu is held.
func (r *race[T]) launch(n int32) {
	if r.results == nil {
		// Room for the outcomes of the hedges most races send: one past
		// it waits for the caller, or abandon's goroutine, which take
		// every outcome. Not r.extra, which MaxExtra lets be any size.
		r.results = make(chan outcome[T], min(r.extra, maxWaitingOutcomes))
	}
	hk := &keeper{hedge: n}
	y := new(yielder)
	actx, cancel := context.WithCancel(context.WithValue(context.WithValue(r.ctx, hedgeKey{}, r.c.p), yieldKey{}, y))
	hk.budget, y.cancel = cancel, cancel
	r.keepHedge(hk)
	a := r.c
	a.k, a.hedged = hk, false // set as it is sent (racing)
	results := r.results
	r.running++
	go func() {
		o := outcome[T]{keep: hk}
		returned := false
		defer func() {
			if !returned {
				if o.panicked = recover(); o.panicked == nil {
					o.goexit = true
				}
			}
			r.hedgeEnded(&o)
			results <- o
		}()
		o.res, o.err = a.attempt(actx, true, r)
		o.late = o.err != nil && ended(r.ctx)
		r.refusedHedge(&a, o.err)
		if y.yielded.Load() && (o.err != nil || r.c.k != nil) {
			o.err = errYielded // its context canceled: a streamed success too, cut short (review120)
		}
		returned = true
	}()
}

// hedgeEnded tells r how a hedge ended. Only a success (or a panic) cuts
// the first attempt short: a hedge's failure, even one not to retry, such
// as a 409 for an idempotency key whose first request still runs, may be
// that very attempt's doing, and the first may yet succeed.
func (r *race[T]) hedgeEnded(o *outcome[T]) {
	if (o.err == nil || o.panicked != nil || o.goexit) && r.phase.CompareAndSwap(firstRunning, firstCut) {
		r.cutter.Store(o.keep)
		r.firstCtx.end()    // the caller takes this answer once the first attempt returns
		r.cutHedges(o.keep) // and the other hedges' slots go now, not then (review117)
	} else if r.decided.Load() {
		r.stopHedges() // but it does stop the next hedge (see call.sent)
	}
}

// errUnsent is the error of a hedge not sent because its race was decided
// (or its breaker opened) as it was admitted: of class canceled for the
// gates, and no answer for the race (settle passes over it; review141: a
// hedge's bare cancellation decided a race, 2 calls in 3,000 failed).
var errUnsent = fmt.Errorf("pipeline: hedge not sent: %w", context.Canceled)

// sendsClosed, in race.sent, marks a race that has returned: no hedge is
// sent after it.
const sendsClosed = 1 << 30

// sendHedge counts a hedge about to be sent, and reports whether it may
// be: not once the race has returned (closeSends), whose call then says
// whether a hedge was sent (Hedged): either the hedge is counted before,
// or it is not sent.
func (r *race[T]) sendHedge() bool {
	for {
		n := r.sent.Load()
		if n&sendsClosed != 0 {
			return false
		}
		if r.sent.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// closeSends ends the sending of r's hedges as it returns, and returns
// how many were sent.
func (r *race[T]) closeSends() int32 {
	for {
		n := r.sent.Load()
		if r.sent.CompareAndSwap(n, n|sendsClosed) {
			return n &^ sendsClosed
		}
	}
}

// closed reports whether r sends no more hedges: it returned, its first
// attempt succeeded, or an attempt failed with an error not retried.
func (r *race[T]) closed() bool {
	return r.sent.Load()&sendsClosed != 0 || r.phase.Load() == firstWon || r.decided.Load()
}

// lone reports whether r's first attempt failed while a hedge of its is
// the only one out: that hedge, not yet sent (a slow listener or tracer
// held it up), would be a retry that no retry stage saw, as in fire
// (review156).
func (r *race[T]) lone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failedAlone(1)
}

// failedAlone reports whether r's first attempt failed while no more than
// out hedges of its are out; r.mu is held.
func (r *race[T]) failedAlone(out int32) bool {
	return r.phase.Load() == firstReturned && r.running <= out
}

// refusedHedge takes a hedge that was sent (a, the hedge's call) out of
// r's count if its operation refused it as the caller's, with an error of
// class rejected: httpclient's refusal to send a hedge while the first
// attempt still reads a streamed body.
func (r *race[T]) refusedHedge(a *call[T], err error) {
	if a.hedged && ofClass(err, resilience.ClassRejected) {
		r.unsend()
	}
}

// unsend takes a hedge that sendHedge counted, and that was not sent, out
// of r's count.
func (r *race[T]) unsend() { r.sent.Add(-1) }

// ofClass reports whether err, an attempt's, is of class c: rejected, the
// attempt was refused on the caller's side, not sent; canceled, its
// caller gave up. An error whose methods panic as it is classified is of
// neither.
func ofClass(err error, c resilience.Class) bool {
	if err == nil {
		return false
	}
	got, ok := classify.Safely(err)
	return ok && got == c
}

// answered is the error of a race that its context ended after an
// attempt of it failed: the ending's for the caller, and that failure its
// answer, which a breaker counts the call by (retrypolicy.Error.Answer).
type answered struct{ err, answer error }

func (a *answered) Error() string { return a.err.Error() }
func (a *answered) Unwrap() error { return a.err }
func (a *answered) Answer() error { return a.answer }

// settle takes the outcome of an attempt, and reports whether it ends the
// race: a success or an answer not to retry, which is then r.last. A panic
// or runtime.Goexit of the attempt goes on in the caller.
func (r *race[T]) settle(o outcome[T]) bool {
	if o.panicked != nil || o.goexit {
		o.keep.release()
		if r.have { // an answer that will not be returned
			r.dispose(r.last)
			r.have = false
		}
		r.abandon(nil)
		if o.goexit {
			runtime.Goexit()
		}
		panic(o.panicked)
	}
	if r.refusedHere(o) {
		return false
	}
	again := o.err != nil && retryable(o.err)
	if o.late && o.err != nil {
		r.lateAnswer(&o, again)
	}
	if r.have && again && retryAfter(r.last.err) > retryAfter(o.err) {
		if a := o.answer(); a != nil && r.last.answer() == nil {
			r.last.err = &answered{r.last.err, a}
		}
		r.dispose(o) // the dependency's longest hint decides the retry's delay
		return false
	}
	if r.have {
		r.dispose(r.last)
	}
	r.last, r.have = o, true
	if again {
		return false
	}
	r.abandon(o.keep)
	r.keep(o)
	return true
}

// refusedHere takes o if it was refused on our side (throttle, limit)
// while attempts are out or an answer is in: no more hedges, but the
// attempts out may still answer, and one that did is the answer; else
// the first refusal is (review120: a hedge's refusal replaced the first
// attempt's own).
func (r *race[T]) refusedHere(o outcome[T]) bool {
	if o.err == errUnsent { // not sent: no answer; the race is another attempt's, the first's at the latest
		r.dispose(o)
		return true
	}
	if !ofClass(o.err, resilience.ClassRejected) || !r.stopHedges() && !r.have {
		return false
	}
	if r.have {
		r.dispose(o)
	} else {
		r.last, r.have = o, true
	}
	return true
}

// dispose gives the result of an attempt that is not returned to the
// call's Discard function, if any, and cancels its contexts. A loser that
// panicked or called runtime.Goexit after the call was decided has no
// caller left to go on in: it is logged.
func (r *race[T]) dispose(o outcome[T]) {
	if o.panicked != nil || o.goexit {
		safe.LogPanic("resiliencekit: a hedged attempt panicked or called runtime.Goexit after its call was decided", "panic", o.panicked)
	}
	if fn, ok := r.c.opts.discard.(func(T)); ok && o.panicked == nil && !o.goexit {
		safe.Discard(fn, o.res)
	}
	o.keep.release()
}

// keep hands o's contexts to the call's keeper, if it has one, else
// cancels them: without the keeper's once if r is alone (nothing was sent
// but the first attempt, whose keeper no other goroutine has seen).
func (r *race[T]) keep(o outcome[T]) {
	k := r.c.k
	switch {
	case k == nil && r.alone:
		o.keep.cancel()
		return
	case k == nil:
		o.keep.release()
		return
	}
	prev := k.attempt
	k.attempt = o.keep.release
	if prev != nil {
		prev()
	}
}

// cutHedges sends no more hedges and cancels those out but the winner,
// whose answer the caller takes once the first attempt, cut short, has
// returned: until then, the losers would hold their gates' slots. Their
// failures are losers' (finish); abandon cancels them again, which does
// nothing.
func (r *race[T]) cutHedges(winner *keeper) {
	r.mu.Lock()
	r.stop()
	keepers := *r.keepers // launch kept at least the winner
	r.mu.Unlock()
	cancelBut(keepers, winner)
}

// abandon sends no more hedges, cancels those still running, all but the
// winner's, and disposes of their results as they come, on a goroutine of
// its own.
func (r *race[T]) abandon(winner *keeper) {
	r.mu.Lock()
	r.stop()
	n, results, keepers := r.running, r.results, r.keepers
	r.running = 0
	r.mu.Unlock()
	if n == 0 {
		return
	}
	cancelBut(*keepers, winner) // n > 0: a hedge was launched
	go func() {
		for range n {
			r.dispose(<-results)
		}
	}()
}

// cancelBut cancels the attempts of keepers, all but the winner's.
func cancelBut(keepers []*keeper, winner *keeper) {
	for _, hk := range keepers {
		if hk != winner {
			hk.budget() // cancels the attempt's context
		}
	}
}

// spareHedged keeps the memory of one hedged call that is over, for the
// pipeline's next call of the same result type, which would otherwise
// allocate it: a pipeline keeps one, zeroed, and nothing of the call, of
// at most maxSpare bytes (a small result type's). Only
// a call whose races sent no hedge leaves it (call.shared): the pipeline's
// timer had let go of its race before it was due, no hedge ran, and the
// first attempt's context, which its operation may keep, is allocated
// apart. A call that finds none, or one of another result type, allocates
// its own. It is safe for concurrent use.
type spareHedged struct{ h atomic.Pointer[any] }

// maxSpare is the most memory a pipeline keeps for its next hedged call:
// the largest objects without a header (see race).
const maxSpare = 512

// newHedged returns the memory of a hedged call, and whether to leave it
// to s once the call is over: s's spare, or a new one if s has none, if
// reusable and small enough; else, or if s keeps another result type's
// (left there for its own calls), one of its own, with its first race's
// context.
func newHedged[T any](s *spareHedged, reusable bool) (*hedged[T], bool) {
	var h *hedged[T]
	if reusable && unsafe.Sizeof(*h) <= maxSpare {
		if h, ok := takeHedged[T](s); ok {
			return h, true
		}
	}
	m := new(struct {
		h   hedged[T]
		ctx lazyCtx
	})
	m.h.race.firstCtx = &m.ctx
	return &m.h, false
}

// takeHedged returns s's spare if it is a *hedged[T], or a new one if s
// has none; ok is false if s keeps another type's, which it leaves.
func takeHedged[T any](s *spareHedged) (h *hedged[T], ok bool) {
	for {
		p := s.h.Load()
		if p == nil {
			h = new(hedged[T])
			h.self = h
			return h, true
		}
		if h, ok = (*p).(*hedged[T]); !ok {
			return nil, false
		}
		if s.h.CompareAndSwap(p, nil) {
			return h, true
		}
	}
}

// putHedged zeroes h and leaves it in s for the next call.
func putHedged[T any](s *spareHedged, h *hedged[T]) {
	h.state, h.race = state{}, race[T]{}
	s.h.Store(&h.self)
}

// hedgeKey marks a hedge's context with the Pipeline that sent it.
type hedgeKey struct{}

// IsHedge reports whether ctx is the context of one of p's hedges: a twin
// of the attempt before it, sent while that one still ran ([WithHedging]).
// The context of a call through p that a hedge of another pipeline makes
// (its operation calls through p) is not: each pipeline tells its own. An
// integration that numbers its attempts on the wire, as httpclient does in
// retrysignal's header, gives a hedge the number of its twin, marked as a
// hedge, not a number of its own past the most attempts. It is safe for
// concurrent use; a nil p has no hedges.
func (p *Pipeline) IsHedge(ctx context.Context) bool {
	by, _ := ctx.Value(hedgeKey{}).(*Pipeline)
	return p != nil && by == p
}

// Hedged reports whether err is the error of a call through a pipeline
// that sent a hedge ([WithHedging]), or of one that such a call's
// operation made: the dependency got the call more than once, as a retry
// would have sent it, so that retrysignal tells the caller not to retry
// it, though the retry stage made one attempt (MaxAttempts(1)) or the
// pipeline has none. A hedge counts once the gates let it through and the
// operation is called, unless the operation refuses it with an error of
// class rejected (httpclient refuses to send a hedge while the first
// attempt still reads a streamed body), which it may also give for a
// request that it sent in part. A hedge is sent only if counted before
// its race returned; one counted as it was decided, whose EventHedged a
// slow listener held up meanwhile, counts though its operation is then
// not called: Hedged may say a hedge was sent when none was, never the
// reverse. The error is the attempts' as it would be without hedges,
// wrapped to say so.
func Hedged(err error) bool {
	var h *hedgedError
	return errors.As(err, &h)
}

// hedgedError is the error of an attempt of the retry stage (a race) that
// sent a hedge.
type hedgedError struct{ err error }

func (e *hedgedError) Error() string { return fmt.Sprint(e.err) } // as fmt prints a caller's error whose Error panics
func (e *hedgedError) Unwrap() error { return e.err }

// retryAfter returns err's retry-after hint, 0 if none.
func retryAfter(err error) time.Duration {
	d, _ := classify.RetryAfter(err)
	return d
}
