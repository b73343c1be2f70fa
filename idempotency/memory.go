package idempotency

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryStore is a [Store] in this process's memory, bounded in bytes:
// the keys, bodies, headers, fingerprints and tokens it holds, plus
// [MemoryEntryOverhead] per entry, never add up to more than its bound (a
// body is copied to a buffer of its exact length, so what is counted is
// what is held).
// It never evicts a claim still in flight: to make room, an expired record
// goes first, then an expired claim, then the oldest completed records; a
// store full of requests still running answers [ErrFull], and a result
// that cannot fit even then is kept without its body, as Truncated (not
// replayable, not run again). It is safe for concurrent use; the zero
// value is not usable, call [NewMemoryStore].
type MemoryStore struct {
	mu        sync.Mutex
	max       int64
	used      int64
	entries   map[string]*memEntry
	completed list.List // of *memEntry, oldest completion first
	claims    list.List // of *memEntry in flight, oldest claim first
}

type memEntry struct {
	key     string
	rec     Record
	expires time.Time
	size    int64
	el      *list.Element // in completed once Done, in claims before
}

// DefaultMemoryBytes is the bound of a [MemoryStore] made with
// NewMemoryStore(0): 64 MiB.
const DefaultMemoryBytes = 64 << 20

// MemoryEntryOverhead is what a [MemoryStore] counts for each entry on
// top of its bytes: the map, list and record structures.
const MemoryEntryOverhead = 256

// MinMemoryBytes is the smallest bound of a [MemoryStore] other than 0:
// room for the claim of one request with the longest key
// ([idempotencykey.MaxLen] bytes) in the longest scope the middleware
// makes, which a smaller store could never hold, refusing every request.
const MinMemoryBytes = 1 << 10

// NewMemoryStore returns an empty store holding at most maxBytes bytes of
// records (see [MemoryStore] for what counts); maxBytes 0 means
// [DefaultMemoryBytes], 64 MiB. It panics if maxBytes < 0 or if
// 0 < maxBytes < [MinMemoryBytes].
func NewMemoryStore(maxBytes int64) *MemoryStore {
	if maxBytes < 0 || (maxBytes > 0 && maxBytes < MinMemoryBytes) {
		panic(fmt.Sprintf("idempotency: NewMemoryStore(%d): maxBytes must be 0 (the default) or at least MinMemoryBytes (%d)", maxBytes, MinMemoryBytes))
	}
	if maxBytes == 0 {
		maxBytes = DefaultMemoryBytes
	}
	return &MemoryStore{max: maxBytes, entries: make(map[string]*memEntry)}
}

// Bytes returns how many bytes the store counts its records as, at most
// its bound.
func (s *MemoryStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// sizeOf returns what an entry of rec under key counts for.
func sizeOf(key string, rec Record) int64 {
	n := MemoryEntryOverhead + len(key) + len(rec.Fingerprint) + len(rec.Token) + cap(rec.Body) // what the body holds on to
	for k, vs := range rec.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return int64(n)
}

// Len returns how many records the store holds, expired ones included until
// they are dropped.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Begin implements [Store].
func (s *MemoryStore) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		if now.Before(e.expires) {
			if e.rec.Holds(claim) {
				return nil, nil
			}
			rec := e.rec
			return &rec, nil
		}
		s.remove(e)
	}
	size := sizeOf(key, claim)
	for s.used+size > s.max {
		if !s.makeRoom(now) {
			return nil, ErrFull
		}
	}
	e := &memEntry{key: key, rec: claim, expires: now.Add(lease), size: size}
	e.el = s.claims.PushBack(e)
	s.entries[key] = e
	s.used += size
	return nil, nil
}

// makeRoom frees one entry, if it can without dropping a live claim: an
// expired record, else an expired claim, else the oldest record.
func (s *MemoryStore) makeRoom(now time.Time) bool {
	front := s.completed.Front()
	if front != nil && !now.Before(front.Value.(*memEntry).expires) {
		s.remove(front.Value.(*memEntry)) // the oldest record, expired (all have one TTL)
		return true
	}
	for el := s.claims.Front(); el != nil; el = el.Next() { // claims in flight are few
		if e := el.Value.(*memEntry); !now.Before(e.expires) {
			s.remove(e)
			return true
		}
	}
	if front != nil {
		s.remove(front.Value.(*memEntry))
		return true
	}
	return false
}

// Renew implements [Store].
func (s *MemoryStore) Renew(ctx context.Context, key string, claim Record, lease time.Duration) error {
	return s.withHeld(ctx, key, claim, func(e *memEntry) { e.expires = time.Now().Add(lease) })
}

// Complete implements [Store].
func (s *MemoryStore) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	return s.withHeld(ctx, key, claim, func(e *memEntry) {
		s.claims.Remove(e.el)
		s.used -= e.size
		if cap(rec.Body) > len(rec.Body) { // keep no more than is counted
			rec.Body = append(make([]byte, 0, len(rec.Body)), rec.Body...)
		}
		size := sizeOf(key, rec)
		for s.used+size > s.max && s.completed.Len() > 0 { // the oldest records make room, never a claim
			s.remove(s.completed.Front().Value.(*memEntry))
		}
		if s.used+size > s.max { // no room even then: keep the outcome, not the body
			rec.Body, rec.Header, rec.Truncated = nil, nil, true
			size = sizeOf(key, rec)
		}
		e.rec, e.size = rec, size
		e.expires = time.Now().Add(ttl)
		e.el = s.completed.PushBack(e)
		s.used += size
	})
}

// Release implements [Store].
func (s *MemoryStore) Release(ctx context.Context, key string, claim Record) error {
	return s.withHeld(ctx, key, claim, s.remove)
}

// withHeld calls fn with key's entry under the lock, if it still holds
// claim, and returns ErrNotOwner otherwise.
func (s *MemoryStore) withHeld(ctx context.Context, key string, claim Record, fn func(*memEntry)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held(key, claim)
	if !ok {
		return ErrNotOwner
	}
	fn(e)
	return nil
}

// has reports whether s holds key: a claim whose lease runs, or a record.
func (s *MemoryStore) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	return ok && time.Now().Before(e.expires)
}

// held returns key's entry if it is still claim, its lease running.
func (s *MemoryStore) held(key string, claim Record) (*memEntry, bool) {
	e, ok := s.entries[key]
	if !ok || e.rec.Done || e.rec.Token != claim.Token || !time.Now().Before(e.expires) {
		return nil, false
	}
	return e, true
}

func (s *MemoryStore) remove(e *memEntry) {
	delete(s.entries, e.key)
	s.used -= e.size
	if e.rec.Done {
		s.completed.Remove(e.el)
	} else {
		s.claims.Remove(e.el)
	}
}
