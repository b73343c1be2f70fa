// Package idempotencystore keeps idempotency records in Redis, so that every
// replica of a service shares the keys: a claim is a SET NX with an expiry,
// atomic across replicas, and completing or releasing it is a script that
// acts only if the key still holds that claim.
package idempotencystore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/internal/timeouts"
)

// Store is an [idempotency.Store] on Redis. It is safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

// New returns a Store that keeps its records in c under keys starting with
// prefix ("idempotency:" if empty). c must have ContextTimeoutEnabled, so
// that the middleware's time bound on each call holds even against a frozen
// server; New panics otherwise.
func New(c redis.UniversalClient, prefix string) *Store {
	timeouts.Check("idempotencystore.New", c)
	if prefix == "" {
		prefix = "idempotency:"
	}
	return &Store{c: c, prefix: prefix}
}

// replaceIfHeld sets KEYS[1] to ARGV[2] for ARGV[3] ms if it holds ARGV[1].
var replaceIfHeld = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
	return 1
end
return 0`)

// renewIfHeld sets KEYS[1] to expire in ARGV[2] ms if it holds ARGV[1].
var renewIfHeld = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)

// deleteIfHeld deletes KEYS[1] if it holds ARGV[1].
var deleteIfHeld = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// Begin implements [idempotency.Store].
func (s *Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	data, err := json.Marshal(claim)
	if err != nil {
		return nil, err
	}
	k := s.prefix + key
	// A key can expire between a failed SET NX and the GET; try again then.
	for range 3 {
		ok, err := s.c.SetNX(ctx, k, data, lease).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, nil
		}
		found, err := s.c.Get(ctx, k).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var rec idempotency.Record
		if err := json.Unmarshal(found, &rec); err != nil {
			return nil, err
		}
		return &rec, nil
	}
	return nil, errors.New("idempotencystore: key kept expiring while claimed")
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	old, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	n, err := replaceIfHeld.Run(ctx, s.c, []string{s.prefix + key}, old, data, ttl.Milliseconds()).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Renew implements [idempotency.Store].
func (s *Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	old, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	n, err := renewIfHeld.Run(ctx, s.c, []string{s.prefix + key}, old, lease.Milliseconds()).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	old, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	n, err := deleteIfHeld.Run(ctx, s.c, []string{s.prefix + key}, old).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}
