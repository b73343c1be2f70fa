package breaker

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Group holds a breaker per key, such as one per host or per method of a
// service, so that one failing key does not open the breaker of the
// others: the breaker of a key is made on the key's first [Group.Get], and
// a Group makes at most a bounded number of them, so that keys from
// outside (hosts a request names) cannot grow it without end.
//
// A key already seen costs one atomic load and a map read, with no lock
// and no allocation, so Get can run on every call. Making a key's breaker
// copies the map: a Group suits up to a few thousand keys, each added once
// and read for ever. A Group is safe for concurrent use and must not be
// copied after first use. The zero Group holds no breaker and makes none;
// use [NewGroup].
type Group[K comparable] struct {
	newBreaker func(key K) *Breaker
	limit      int
	m          atomic.Pointer[map[K]*Breaker] // read without the lock; replaced, never changed
	mu         sync.Mutex                     // serializes making
}

// NewGroup returns a Group that makes the breaker of a key by
// newBreaker(key), called once per key under the Group's lock, for at most
// limit keys. newBreaker may share state across replicas ([Shared]) or
// return the same breaker for several keys. A Group does not close the
// breakers it made: a shared breaker's flusher and watcher run until its
// [Breaker.Close], so newBreaker that makes shared ones keeps them where
// the program can close them as it stops. It panics if newBreaker is nil
// or limit is under 1.
func NewGroup[K comparable](limit int, newBreaker func(key K) *Breaker) *Group[K] {
	if newBreaker == nil {
		panic("breaker: NewGroup: newBreaker is nil")
	}
	if limit < 1 {
		panic(fmt.Sprintf("breaker: NewGroup(%d): limit must be 1 or more", limit))
	}
	return &Group[K]{newBreaker: newBreaker, limit: limit}
}

// Get returns the breaker of key and true, making it on key's first Get.
// If the Group already holds its limit of breakers, Get returns nil and
// false for a new key, and makes nothing: the caller goes on without a
// breaker for it (as httpclient and grpcclient do), not with one shared
// by all the keys past the bound, which one dead key would open for the
// others.
func (g *Group[K]) Get(key K) (*Breaker, bool) {
	if p := g.m.Load(); p != nil {
		if b, ok := (*p)[key]; ok {
			return b, true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var cur map[K]*Breaker
	if p := g.m.Load(); p != nil {
		cur = *p
	}
	if b, ok := cur[key]; ok {
		return b, true
	}
	if len(cur) >= g.limit {
		return nil, false
	}
	next := make(map[K]*Breaker, len(cur)+1)
	for k, b := range cur {
		next[k] = b
	}
	b := g.newBreaker(key)
	next[key] = b
	g.m.Store(&next)
	return b, true
}

// Len returns how many keys have a breaker.
func (g *Group[K]) Len() int {
	if p := g.m.Load(); p != nil {
		return len(*p)
	}
	return 0
}
