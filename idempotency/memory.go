package idempotency

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// MemoryStore is a [Store] in this process's memory, bounded in entries.
// Expired records are dropped as new ones arrive; when the store is full
// the oldest record is evicted, even before it expires. It is safe for
// concurrent use; the zero value is not usable, call [NewMemoryStore].
type MemoryStore struct {
	mu      sync.Mutex
	max     int
	entries map[string]*list.Element // of *memEntry, oldest first in order
	order   list.List
}

type memEntry struct {
	key     string
	rec     Record
	expires time.Time
}

// NewMemoryStore returns an empty store holding at most maxEntries
// records; maxEntries <= 0 means 10,000.
func NewMemoryStore(maxEntries int) *MemoryStore {
	if maxEntries <= 0 {
		maxEntries = 10_000
	}
	return &MemoryStore{max: maxEntries, entries: make(map[string]*list.Element)}
}

// Len returns how many records the store holds, expired ones included until
// they are dropped.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Begin implements [Store].
func (s *MemoryStore) Begin(ctx context.Context, key string, claim Record, lockTTL time.Duration) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.entries[key]; ok {
		e := el.Value.(*memEntry)
		if now.Before(e.expires) {
			rec := e.rec
			return &rec, nil
		}
		s.remove(el)
	}
	s.dropExpired(now)
	for len(s.entries) >= s.max {
		s.remove(s.order.Front())
	}
	s.entries[key] = s.order.PushBack(&memEntry{key: key, rec: claim, expires: now.Add(lockTTL)})
	return nil, nil
}

// Complete implements [Store].
func (s *MemoryStore) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.held(key, claim)
	if !ok {
		return ErrNotOwner
	}
	e := el.Value.(*memEntry)
	e.rec = rec
	e.expires = time.Now().Add(ttl)
	s.order.MoveToBack(el)
	return nil
}

// Release implements [Store].
func (s *MemoryStore) Release(ctx context.Context, key string, claim Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.held(key, claim)
	if !ok {
		return ErrNotOwner
	}
	s.remove(el)
	return nil
}

// held returns key's entry if it is still claim, unexpired.
func (s *MemoryStore) held(key string, claim Record) (*list.Element, bool) {
	el, ok := s.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*memEntry)
	if e.rec.Done || e.rec.Token != claim.Token || !time.Now().Before(e.expires) {
		return nil, false
	}
	return el, true
}

// dropExpired removes expired records from the oldest end until it meets
// a live one.
func (s *MemoryStore) dropExpired(now time.Time) {
	for el := s.order.Front(); el != nil; el = s.order.Front() {
		if now.Before(el.Value.(*memEntry).expires) {
			return
		}
		s.remove(el)
	}
}

func (s *MemoryStore) remove(el *list.Element) {
	delete(s.entries, el.Value.(*memEntry).key)
	s.order.Remove(el)
}
