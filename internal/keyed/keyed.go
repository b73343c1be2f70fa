// Package keyed holds values made on the first use of their key, bounded
// in number, for a lookup on every call such as the breaker of a host: a
// key already seen costs one atomic load and a map read, with no lock and
// no allocation. Adding a key copies the map, so it suits a few thousand
// keys that are added once and read for ever.
package keyed

import (
	"sync"
	"sync/atomic"
)

// Map maps keys to values made on their first [Map.Get]. The zero Map is
// empty and ready to use; it is safe for concurrent use and must not be
// copied after first use.
type Map[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V] // read without the lock; replaced, never changed
	mu sync.Mutex              // serializes adding
}

// Get returns the value of k and true. On k's first Get it makes the value
// by newValue(k), called once per key under the map's lock, if the map
// holds fewer than limit keys; if it holds limit already, Get returns the
// zero V and false, and makes nothing.
func (m *Map[K, V]) Get(k K, limit int, newValue func(K) V) (V, bool) {
	if p := m.m.Load(); p != nil {
		if v, ok := (*p)[k]; ok {
			return v, true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var cur map[K]V
	if p := m.m.Load(); p != nil {
		cur = *p
	}
	if v, ok := cur[k]; ok {
		return v, true
	}
	if len(cur) >= limit {
		var zero V
		return zero, false
	}
	next := make(map[K]V, len(cur)+1)
	for key, v := range cur {
		next[key] = v
	}
	v := newValue(k)
	next[k] = v
	m.m.Store(&next)
	return v, true
}

// Len returns how many keys have a value.
func (m *Map[K, V]) Len() int {
	if p := m.m.Load(); p != nil {
		return len(*p)
	}
	return 0
}
