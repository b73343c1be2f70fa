// Package registry keeps a service's breakers and pipelines by name, so
// that their live state can be read from outside the calls, by a dashboard
// (package dashboard) or a test.
//
// Registration is opt-in, per object: [Registry.AddBreaker] adds a
// breaker, [Registry.AddPipeline] a pipeline (and its breaker) and returns
// the pipeline to call through, the same stages with a listener of the
// registry's added. [Default] is a registry for a program that wants one
// for all; nothing registers in it by itself. A name is registered once:
// the same name twice is an error ([ErrDuplicate]), not an overwrite.
//
// A registry costs a pipeline that is not registered nothing, and one that
// is only its listener, which the pipeline tells of calls and attempts
// without an event: on the success path, one atomic addition as a call
// starts and one per attempt, no allocation, and the two clock reads of a
// call's duration on one call in [SampleEvery], chosen as it starts (the
// latency quantiles are of those).
//
// A pipeline's figures count each call once, as it starts, and each
// attempt sent as it ends: a call succeeded if an attempt did, failed if
// its last attempt failed, panicked or called runtime.Goexit (which its
// breaker counts neither way: the caller's bug). An attempt refused before it was sent (throttle,
// concurrency limit, the breaker's re-check) is neither a success nor a
// failure: it counts in Throttled, Limited or Rejected, which count
// refusals, not calls. A call whose first attempt was refused counts
// there alone; one whose retry was refused counts as a failure (its last
// attempt's) and its retry's refusal as one of those, as a call that the
// breaker stopped between retries counts as a failure. An attempt its caller canceled is
// an attempt, and its call a failure only if a failed attempt came
// before it (in the retry, or the backoff), as the breaker counts them. A call that ends
// with an error of its own making, of class rejected, that its operation
// returned (grpcclient's request over a size limit, httpclient's bad URL)
// counts in Calls alone: neither the dependency's failure nor a stage's
// refusal. A failure
// counts as one from its attempt's end until a retry follows it: the
// failures of calls still retrying are told again as their retries
// end. A call that waits for its breaker
// (WaitWhenOpen) is one call however often the breaker refuses it; each
// refusal is one of Rejected. A breaker's figures are the ones
// it keeps anyway ([breaker.Breaker.Snapshot]); its successes, failures
// and rejections over time are those of the registered pipelines built on
// it.
//
// A pipeline's figures count by the class of each attempt's error, not
// by the breaker's verdict: they differ from the breaker's own counts for
// a permanent error (a 400: a failure here, a success for the breaker), a
// breaker's FailIf or IgnoreIf, a call the breaker takes for cut short by
// its deadline (a failure here, left out there), an answer of class
// pending (a failed attempt here), a call whose retries RetryIf made after
// the operation's own cancellations (class canceled, the caller's context
// alive) and that ended with one (a failure here, left out there), and a
// panic (see above). A call whose
// first attempt failed is a failure from then until a retry of it
// succeeds, which takes the failure back: from the totals, and from the
// newest points of the series that have one.
//
// The registry holds what it registers weakly: a breaker or pipeline no
// longer used elsewhere is unregistered when it is garbage collected, a
// shared breaker once it is closed (its name is free at once), and
// [Registry.RemoveBreaker] and [Registry.RemovePipeline] unregister one at
// once. Rates and the series
// behind sparklines are sampled when a snapshot is taken, at most once per
// [Interval]: nothing runs in the background.
package registry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"weak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// Errors of registration and control, matched with [errors.Is].
var (
	// ErrDuplicate means another breaker or pipeline is registered under
	// the name.
	ErrDuplicate = errors.New("registry: name already registered")
	// ErrNotFound means nothing is registered under the name.
	ErrNotFound = errors.New("registry: no such name")
	// ErrNoName means the breaker or pipeline has no name to register it
	// under.
	ErrNoName = errors.New("registry: no name")
	// ErrInvalidName means the name is not valid UTF-8: names travel as
	// JSON text, where the bytes that are not would all become U+FFFD, and
	// two such names one, which a control could not tell apart.
	ErrInvalidName = errors.New("registry: name not valid UTF-8")
)

// Default is a registry for a program that keeps all its breakers and
// pipelines in one. Nothing registers in it by itself.
var Default = New()

// Registry holds breakers and pipelines by name. It is safe for concurrent
// use. The zero Registry is not usable: make one with [New].
type Registry struct {
	cfg config

	mu        sync.Mutex
	breakers  map[string]*breakerEntry
	pipelines map[string]*pipelineEntry

	// smu is held by a snapshot, which reads the entries without mu: the
	// points it takes (the entries' series, last, lastAt, rate and span)
	// and sampled are the snapshots' alone.
	smu     sync.Mutex
	sampled time.Time // when the series last took a point
}

type breakerEntry struct {
	b      weak.Pointer[breaker.Breaker]
	series series
}

// live returns the entry's breaker, nil if it was collected or, shared,
// closed: then its name is free.
func (e *breakerEntry) live() *breaker.Breaker {
	if b := e.b.Value(); b != nil && !b.Snapshot().Closed {
		return b
	}
	return nil
}

type pipelineEntry struct {
	p       weak.Pointer[pipeline.Pipeline]
	stats   *stats
	breaker string // its breaker's name, "" if none
	series  series
	last    totals    // at the last point
	lastAt  time.Time // of the last point, or the registration
	rate    totals    // the last point's counts
	span    time.Duration
}

// New returns an empty Registry configured by opts.
func New(opts ...Option) *Registry {
	cfg := config{interval: time.Second, points: 300}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return &Registry{cfg: cfg, sampled: time.Now(), breakers: map[string]*breakerEntry{}, pipelines: map[string]*pipelineEntry{}}
}

// AddBreaker registers b under its name. It returns an error matching
// [ErrDuplicate] if another breaker has the name (b itself again is not an
// error), [ErrNoName] for a breaker without one, [ErrInvalidName] for one
// whose name is not valid UTF-8.
func (r *Registry) AddBreaker(b *breaker.Breaker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addBreakerLocked(b)
}

func (r *Registry) addBreakerLocked(b *breaker.Breaker) error {
	name := b.Name()
	if name == "" {
		return fmt.Errorf("%w: a breaker must be made with breaker.New", ErrNoName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: breaker %q", ErrInvalidName, name)
	}
	if e, ok := r.breakers[name]; ok {
		if e.b.Value() == b {
			return nil
		}
		if e.live() != nil {
			return fmt.Errorf("%w: breaker %q", ErrDuplicate, name)
		}
	}
	wp := weak.Make(b)
	r.breakers[name] = &breakerEntry{b: wp, series: newSeries(r.cfg.points)}
	runtime.AddCleanup(b, func(name string) { r.forgetBreaker(name, wp) }, name)
	return nil
}

// forgetBreaker unregisters the breaker of name once it is collected, if
// it is still the one registered.
func (r *Registry) forgetBreaker(name string, wp weak.Pointer[breaker.Breaker]) {
	remove(r, r.breakers, name, func(e *breakerEntry) bool { return e.b == wp })
}

// RemoveBreaker unregisters the breaker named name, and reports whether
// there was one.
func (r *Registry) RemoveBreaker(name string) bool {
	return remove(r, r.breakers, name, nil)
}

// remove deletes m[name] under r's lock, if there is one and match (nil:
// any) says it is the one, and reports whether it did.
func remove[E any](r *Registry, m map[string]E, name string, match func(E) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := m[name]
	if !ok || (match != nil && !match(e)) {
		return false
	}
	delete(m, name)
	return true
}

// AddPipeline registers p under its name (pipeline.WithName's, or its
// breaker's), and its breaker too if it has one not registered yet, and
// returns the pipeline to call through: p's stages with the registry's
// listener added, whose figures the registry reports. Calls through p
// itself are not counted. It returns an error matching [ErrDuplicate] if
// another pipeline has the name, or p's breaker's name is another
// breaker's, [ErrNoName] if p has no name, and [ErrInvalidName] if its
// name or its breaker's is not valid UTF-8.
func (r *Registry) AddPipeline(p *pipeline.Pipeline) (*pipeline.Pipeline, error) {
	st := p.Stages()
	if st.Name == "" {
		return nil, fmt.Errorf("%w: name the pipeline with pipeline.WithName", ErrNoName)
	}
	if !utf8.ValidString(st.Name) {
		return nil, fmt.Errorf("%w: pipeline %q", ErrInvalidName, st.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.pipelines[st.Name]; ok && e.p.Value() != nil {
		return nil, fmt.Errorf("%w: pipeline %q", ErrDuplicate, st.Name)
	}
	if st.Breaker != nil {
		if err := r.addBreakerLocked(st.Breaker); err != nil {
			return nil, err
		}
	}
	s := newStats()
	observed := p.With(pipeline.WithListener(s))
	wp := weak.Make(observed)
	r.pipelines[st.Name] = &pipelineEntry{p: wp, stats: s, breaker: st.Breaker.Name(), series: newSeries(r.cfg.points), lastAt: time.Now()}
	runtime.AddCleanup(observed, func(name string) { r.forgetPipeline(name, wp) }, st.Name)
	return observed, nil
}

// forgetPipeline unregisters the pipeline of name once it is collected,
// if it is still the one registered.
func (r *Registry) forgetPipeline(name string, wp weak.Pointer[pipeline.Pipeline]) {
	remove(r, r.pipelines, name, func(e *pipelineEntry) bool { return e.p == wp })
}

// RemovePipeline unregisters the pipeline named name (its breaker stays
// registered), and reports whether there was one.
func (r *Registry) RemovePipeline(name string) bool {
	return remove(r, r.pipelines, name, nil)
}

// Breaker returns the breaker registered as name, if any.
func (r *Registry) Breaker(name string) (*breaker.Breaker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.breakers[name]; ok {
		if b := e.live(); b != nil {
			return b, true
		}
	}
	return nil, false
}

// SetMode sets the mode of the breaker registered as name (see
// [breaker.Breaker.SetMode]), as by says: who made the change, for its
// event. It returns an error matching [ErrNotFound] if there is no such
// breaker, or the breaker's.
func (r *Registry) SetMode(ctx context.Context, name string, m breaker.Mode, by string) error {
	b, ok := r.Breaker(name)
	if !ok {
		return fmt.Errorf("%w: breaker %q", ErrNotFound, name)
	}
	return b.SetMode(ctx, m, by)
}

// Names returns the names of the breakers and of the pipelines registered,
// sorted.
func (r *Registry) Names() (breakers, pipelines []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// One collected, its cleanup not yet run, is forgotten now: as
	// Snapshot leaves it out (review124).
	for n, e := range r.breakers {
		if e.live() != nil {
			breakers = append(breakers, n)
		} else if e.b.Value() == nil {
			delete(r.breakers, n)
		}
	}
	for n, e := range r.pipelines {
		if e.p.Value() != nil {
			pipelines = append(pipelines, n)
		} else {
			delete(r.pipelines, n)
		}
	}
	slices.SortFunc(breakers, strings.Compare)
	slices.SortFunc(pipelines, strings.Compare)
	return breakers, pipelines
}
