// Package breakerstore keeps the shared state of circuit breakers in Redis
// (see breaker.Shared), so that the replicas of a service open and close
// a dependency's breaker together. The lock is a SET NX with an expiry,
// released only by its holder.
package breakerstore

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrLockTimeout is returned by Lock when another holder kept the lock
// past the wait.
var ErrLockTimeout = errors.New("breakerstore: lock held by another replica")

// Store is a breaker.SharedStore on Redis. It is safe for concurrent use.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	token   string
	timeout time.Duration
	lockTTL time.Duration
	wait    time.Duration

	mu    sync.Mutex
	local map[string]*sync.Mutex // one per name: goroutines of this process queue here, not on Redis
}

// New returns a Store keeping its keys in c under prefix (none if empty).
// Each Redis command gets 500 ms; a lock expires after 2 s if its holder
// dies, and Lock waits up to 1 s for one.
func New(c redis.UniversalClient, prefix string) *Store {
	return &Store{
		c:       c,
		prefix:  prefix,
		token:   rand.Text(),
		timeout: 500 * time.Millisecond,
		lockTTL: 2 * time.Second,
		wait:    time.Second,
		local:   make(map[string]*sync.Mutex),
	}
}

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

func (s *Store) localLock(name string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.local[name]
	if !ok {
		m = new(sync.Mutex)
		s.local[name] = m
	}
	return m
}

// Lock takes the lock called name, waiting for another replica to release
// it for up to a second.
func (s *Store) Lock(name string) error {
	m := s.localLock(name)
	m.Lock()
	deadline := time.Now().Add(s.wait)
	for {
		ctx, cancel := s.ctx()
		ok, err := s.c.SetNX(ctx, s.prefix+name, s.token, s.lockTTL).Result()
		cancel()
		switch {
		case err != nil:
			m.Unlock()
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			m.Unlock()
			return ErrLockTimeout
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var unlock = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// Unlock releases the lock called name if this Store holds it.
func (s *Store) Unlock(name string) error {
	defer s.localLock(name).Unlock()
	ctx, cancel := s.ctx()
	defer cancel()
	return unlock.Run(ctx, s.c, []string{s.prefix + name}, s.token).Err()
}

// GetData returns the data under name, or nil if there is none.
func (s *Store) GetData(name string) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	data, err := s.c.Get(ctx, s.prefix+name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return data, err
}

// SetData stores data under name.
func (s *Store) SetData(name string, data []byte) error {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.c.Set(ctx, s.prefix+name, data, 0).Err()
}
