package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r152 modes of a store call.
const (
	r152OK     = iota
	r152Fail   // an error at once
	r152Hang   // until the call's context ends
	r152Refuse // reads, refuses writes (ErrWritesRefused)
)

var errR152Blip = errors.New("review152: transient store error")

// r152Store is a MemoryStore with faults chosen per call.
type r152Store struct {
	mem *MemoryStore
	mu  sync.Mutex
	// begin chooses the mode of a Begin (probes included); nil: OK.
	begin func(key string) int
	// write chooses the mode of Renew, Complete, Release; nil: OK.
	write  func(op, key string) int
	begins atomic.Int64
}

func newR152Store() *r152Store { return &r152Store{mem: NewMemoryStore(0)} }

func (s *r152Store) modeBegin(key string) int {
	s.begins.Add(1)
	s.mu.Lock()
	f := s.begin
	s.mu.Unlock()
	if f == nil {
		return r152OK
	}
	return f(key)
}

func (s *r152Store) modeWrite(op, key string) int {
	s.mu.Lock()
	f := s.write
	s.mu.Unlock()
	if f == nil {
		return r152OK
	}
	return f(op, key)
}

func (s *r152Store) setBegin(f func(key string) int) {
	s.mu.Lock()
	s.begin = f
	s.mu.Unlock()
}

func (s *r152Store) setWrite(f func(op, key string) int) {
	s.mu.Lock()
	s.write = f
	s.mu.Unlock()
}

// peek returns the live record under key, if any.
func (s *r152Store) peek(key string) *Record {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	e, ok := s.mem.entries[key]
	if !ok || !time.Now().Before(e.expires) {
		return nil
	}
	rec := e.rec
	return &rec
}

func r152Apply(ctx context.Context, mode int) error {
	switch mode {
	case r152Fail:
		return errR152Blip
	case r152Hang:
		<-ctx.Done()
		return ctx.Err()
	case r152Refuse:
		return fmt.Errorf("review152: OOM: %w", ErrWritesRefused)
	}
	return nil
}

func (s *r152Store) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	m := s.modeBegin(key)
	if m == r152Refuse {
		if rec := s.peek(key); rec != nil {
			if rec.Holds(claim) {
				return nil, nil
			}
			return rec, nil
		}
	}
	if err := r152Apply(ctx, m); err != nil {
		return nil, err
	}
	return s.mem.Begin(ctx, key, claim, lease)
}

func (s *r152Store) Renew(ctx context.Context, key string, claim Record, lease time.Duration) error {
	if err := r152Apply(ctx, s.modeWrite("renew", key)); err != nil {
		return err
	}
	return s.mem.Renew(ctx, key, claim, lease)
}

func (s *r152Store) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	if err := r152Apply(ctx, s.modeWrite("complete", key)); err != nil {
		return err
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}

func (s *r152Store) Release(ctx context.Context, key string, claim Record) error {
	if err := r152Apply(ctx, s.modeWrite("release", key)); err != nil {
		return err
	}
	return s.mem.Release(ctx, key, claim)
}

// r152Guard returns a guard on s, counting the times it failed open.
func r152Guard(s Store, opts ...Option) (*Guard, *atomic.Int64) {
	var opened atomic.Int64
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventSharedStateUnavailable {
			opened.Add(1)
		}
	})
	opts = append([]Option{WithListener(l), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	return NewGuard(s, opts...), &opened
}

// r152Run begins key and, if claimed, completes it at once. It reports
// what happened: "ran", "ran-local", "replayed", or the error.
func r152Run(g *Guard, key string) string {
	ctx := context.Background()
	c, rec, err := g.Begin(ctx, "s", key, "fp")
	switch {
	case err != nil:
		return "err:" + err.Error()
	case rec != nil:
		return "replayed"
	}
	local := c.Local()
	_ = c.Complete(ctx, Record{Status: 200, Body: []byte("ok")})
	if local {
		return "ran-local"
	}
	return "ran"
}

// r152Align sleeps until off past a whole second of monotime (the guard's
// epochs), in a synctest bubble.
func r152Align(off time.Duration) {
	now := time.Duration(monotime.Now())
	frac := now % time.Second
	if frac < 0 {
		frac += time.Second
	}
	wait := time.Second - frac + off
	time.Sleep(wait)
}

// r152SleepUntil sleeps until t0+d (fake time).
func r152SleepUntil(t0 time.Time, d time.Duration) {
	if w := time.Until(t0.Add(d)); w > 0 {
		time.Sleep(w)
	}
}

// r152Rand is a concurrency-safe seeded coin.
type r152Rand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newR152Rand(seed uint64) *r152Rand { return &r152Rand{r: rand.New(rand.NewPCG(seed, 152))} }

func (r *r152Rand) under(p float64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64() < p
}
