package idempotency

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryStore is a [Store] in this process's memory, bounded in entries.
// It never evicts a claim still in flight: when it is full, an expired
// record goes first, then an expired claim, then the oldest record; a store
// full of requests still running answers [ErrFull]. It is safe for concurrent use;
// the zero value is not usable, call [NewMemoryStore].
type MemoryStore struct {
	mu        sync.Mutex
	max       int
	entries   map[string]*memEntry
	completed list.List // of *memEntry, oldest completion first
	claims    list.List // of *memEntry in flight, oldest claim first
}

type memEntry struct {
	key     string
	rec     Record
	expires time.Time
	el      *list.Element // in completed once Done, in claims before
}

// NewMemoryStore returns an empty store holding at most maxEntries
// records; maxEntries 0 means 10,000. It panics if maxEntries < 0.
func NewMemoryStore(maxEntries int) *MemoryStore {
	if maxEntries < 0 {
		panic(fmt.Sprintf("idempotency: NewMemoryStore(%d): maxEntries must be 0 or more", maxEntries))
	}
	if maxEntries == 0 {
		maxEntries = 10_000
	}
	return &MemoryStore{max: maxEntries, entries: make(map[string]*memEntry)}
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
			rec := e.rec
			return &rec, nil
		}
		s.remove(e)
	}
	if len(s.entries) >= s.max && !s.makeRoom(now) {
		return nil, ErrFull
	}
	e := &memEntry{key: key, rec: claim, expires: now.Add(lease)}
	e.el = s.claims.PushBack(e)
	s.entries[key] = e
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
		e.rec = rec
		e.expires = time.Now().Add(ttl)
		s.claims.Remove(e.el)
		e.el = s.completed.PushBack(e)
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
	if e.rec.Done {
		s.completed.Remove(e.el)
	} else {
		s.claims.Remove(e.el)
	}
}
