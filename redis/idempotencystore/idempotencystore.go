// Package idempotencystore keeps idempotency records in Redis, so that every
// replica of a service shares the keys: a claim is a SET NX with an expiry,
// atomic across replicas, and completing or releasing it is a script that
// acts only if the key still holds that claim.
package idempotencystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/internal/timeouts"
)

// Store is an [idempotency.Store] on Redis. It is safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	prefix string

	mu     sync.Mutex
	checks map[string]eviction    // by the address of the server read ("" for a client of one server)
	reads  map[string]*policyRead // reads under way, by address

	warming atomic.Bool // a connection is being made (warm)
}

// policyRead is a read of a server's eviction policy, in the background,
// that the claims before its first answer wait for.
type policyRead struct {
	done chan struct{}
	c    eviction
	ok   bool // c was read
}

// eviction is what a server's eviction policy was found to be, and when.
type eviction struct {
	checked time.Time
	evicts  error // ErrEvictionPolicy if it evicts, ErrScriptsRefused if it refuses scripts
}

// ownTime is the least time of its own that the store gives what it sends
// in the background rather than in a claim's time: a read of the eviction
// policy, and the connection it makes after a call ran out of time (warm);
// each has twice as long as the call that started it had, if longer. A new
// connection costs go-redis about three round trips (connect, HELLO,
// CLIENT SETINFO) before its first command, which a claim's time
// (idempotency.StoreTimeout) may not cover on a slow link.
const ownTime = 2 * time.Second

// ownTimeFor returns the time of its own for background work that a call
// with ctx, begun at start, starts: at least ownTime, and twice
// what the call had (a new connection and a command: four round trips).
func ownTimeFor(ctx context.Context, start time.Time) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return ownTime
	}
	return max(ownTime, 2*dl.Sub(start))
}

// ErrEvictionPolicy is what [Store.Begin] returns, and the guard reports
// as a store failure (the request gets 503), while the server runs with a
// maxmemory and a maxmemory-policy other than noeviction: every record
// has a TTL, so volatile-* policies evict them as readily as allkeys-*,
// and an evicted claim in flight lets a repeat run the request again.
var ErrEvictionPolicy = errors.New("idempotencystore: the Redis server evicts keys (maxmemory with a maxmemory-policy other than noeviction): claims in flight could be dropped and requests run twice; set maxmemory-policy noeviction")

// ErrScriptsRefused is what [Store.Begin] returns, and the guard reports
// as a store failure (the request gets 503), while the server refuses the
// store's scripts (EVAL and EVALSHA renamed away or left out, an ACL
// without @scripting): a claim could be taken but never completed,
// renewed or freed, and every retry after a lease would run the request
// again.
var ErrScriptsRefused = errors.New("idempotencystore: the Redis server refuses scripts (EVAL, EVALSHA): a claim could be taken but not completed, and requests run twice; allow @scripting")

// evictionRecheck is how long the eviction policy read is trusted.
const evictionRecheck = time.Minute

// New returns a Store that keeps its records in c under keys starting with
// prefix ("idempotency:" if empty). c must have ContextTimeoutEnabled, so
// that the middleware's time bound on each call holds even against a
// frozen server; New panics otherwise. c must be a *redis.Client (made by
// redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient; New
// panics for another type: a *redis.Ring takes a shard that fails its
// heartbeats out and puts its keys on the others, where a claim held on
// it is not, so a repeat runs the request again while the claim's holder
// still runs it (review165: 2 s after a shard was killed, within a 9 s
// lease), and a wrapper's options cannot be checked (review167). Add
// tracing or metrics to a client by its hooks (AddHook), not a wrapper.
//
// The server must not evict keys: run it with maxmemory-policy noeviction
// (or no maxmemory), since a policy that evicts (volatile-* or allkeys-*)
// can drop a claim in flight, and a repeat then runs the request again; a
// full server refuses new claims instead (503). The store checks it by
// CONFIG GET maxmemory and maxmemory-policy from its first Begin, and
// again once a minute, in the background, with time of its own (twice the
// claim's, 2 s at least): the claims before the first answer wait for it
// (within their own time), the others go on from the last answer. While
// the server evicts, Begin fails with [ErrEvictionPolicy], so that the
// request gets 503 and the guard reports a store failure; after
// [idempotency.FailOpenAfter], as for any store failure, the guard fails
// open and runs keyed requests on its own records: unprotected across
// replicas. A server that refuses CONFIG (managed Redis often does) is not
// checked, and is used: make sure of its policy by the provider's
// settings. The same read runs one of the store's scripts, to no effect:
// a server that refuses scripts (EVAL renamed away, an ACL without
// @scripting) could take a claim but never complete it, and Begin fails
// with [ErrScriptsRefused] as for a server that evicts.
//
// A call of a claim that runs out of time makes the store open a
// connection in the background, with time of its own (twice the claim's, 2
// s at least): go-redis drops a connection whose call timed out, and a new
// one costs about three round trips before its first command (connect,
// HELLO, CLIENT SETINFO), which on a slow link a claim's time may not
// cover. Each claim's calls still need their round trips within
// [idempotency.StoreTimeout]: a first claim of a key, one (SET NX); a
// repeat, two (SET NX, GET). Give it four round trips of the link at
// least, or the claims fail (503) and the guard runs on its own records.
func New(c redis.UniversalClient, prefix string) *Store {
	timeouts.Check("idempotencystore.New", c)
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		panic(fmt.Sprintf("idempotencystore.New: a %T: the store takes a *redis.Client (redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient, whose timeouts and key placement it knows; a Ring moves a failed shard's keys where its claims are not, and requests would run twice", c))
	}
	if prefix == "" {
		prefix = "idempotency:"
	}
	return &Store{c: c, prefix: prefix}
}

// checkEviction returns [ErrEvictionPolicy] if the server that holds key
// evicts keys, or [ErrScriptsRefused] if it refuses the store's scripts,
// as last read, for a call begun at start. It starts a read
// in the background, with time of its own, if none is under way and the last is older than an
// [evictionRecheck]; until the first read has answered, it waits for it
// within ctx. On a cluster that is key's master, each read apart: a
// keyless command goes to whichever node the client picks, whose policy
// says nothing of the others'. A server that refuses CONFIG is taken as
// not checkable, not as evicting; a read that fails otherwise is tried
// again at the next call.
func (s *Store) checkEviction(ctx context.Context, start time.Time, key string) error {
	node, addr := redis.Cmdable(s.c), ""
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil // not known: the claim's own call tells whether the cluster answers
		}
		node, addr = m, m.Options().Addr
	}
	s.mu.Lock()
	c, read := s.checks[addr]
	if read && time.Since(c.checked) < evictionRecheck {
		s.mu.Unlock()
		return c.evicts
	}
	r := s.reads[addr]
	if r == nil {
		r = &policyRead{done: make(chan struct{})}
		if s.reads == nil {
			s.reads, s.checks = make(map[string]*policyRead), make(map[string]eviction)
		}
		s.reads[addr] = r
		go s.readPolicy(node, addr, key, r, ownTimeFor(ctx, start))
	}
	s.mu.Unlock()
	if read {
		return c.evicts // the last answer, while the next is read
	}
	select {
	case <-r.done:
		return r.c.evicts // nil if not read: the claim's own call tells whether the server answers
	case <-ctx.Done():
		return nil
	}
}

// readPolicy reads node's eviction policy into r, and whether it runs the
// store's scripts (on key), with time own of its own, and keeps it for
// addr if it was read.
func (s *Store) readPolicy(node redis.Cmdable, addr, key string, r *policyRead, own time.Duration) {
	defer func() {
		s.mu.Lock()
		delete(s.reads, addr)
		if r.ok {
			s.checks[addr] = r.c
		}
		s.mu.Unlock()
		close(r.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), own)
	defer cancel()
	cfg, err := node.ConfigGet(ctx, "maxmemory*").Result()
	var rerr redis.Error
	unreadable := errors.As(err, &rerr) && refused(rerr) // not checkable
	if err != nil && !unreadable {
		// Not read, and read again at the next claim: a server that did not
		// answer, or answered with a passing error (BUSY, LOADING,
		// MASTERDOWN, TRYAGAIN), may evict. The claim's own call tells
		// whether it answers.
		return
	}
	c := eviction{checked: time.Now()}
	if policy, limit := cfg["maxmemory-policy"], cfg["maxmemory"]; !unreadable && policy != "" && policy != "noeviction" && limit != "" && limit != "0" {
		c.evicts = ErrEvictionPolicy
	} else if scriptsRefused(ctx, node, key) {
		c.evicts = ErrScriptsRefused
	}
	r.c, r.ok = c, true
}

// scriptsRefused runs one of the store's scripts on key, to no effect
// (it frees key only if it holds a value no claim has), and reports
// whether node refused it (review149: a server without EVAL took every
// claim and completed none).
func scriptsRefused(ctx context.Context, node redis.Cmdable, key string) bool {
	err := deleteIfHeld.Run(ctx, node, []string{key}, "\x00").Err()
	var rerr redis.Error
	return errors.As(err, &rerr) && refused(rerr)
}

// warm opens a connection to the server in the background, with time of
// its own, after a call that ran out of ctx's time, unless one is being
// opened: go-redis dropped the call's connection, and on a slow link the
// next call's time may not cover a new one's handshake, nor the one after
// it. One at a time, and only on a call's timeout: a server that is down
// gets no more than one attempt at a time.
func (s *Store) warm(ctx context.Context, start time.Time, err error) {
	if err == nil || ctx.Err() == nil || !s.warming.CompareAndSwap(false, true) {
		return
	}
	own := ownTimeFor(ctx, start)
	go func() {
		defer s.warming.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), own)
		defer cancel()
		_ = s.c.Ping(ctx).Err()
	}()
}

// refused reports whether err is a server's refusal of CONFIG GET: a
// command unknown (renamed, or left out by a managed service) or forbidden
// (NOPERM, an ACL's), both generic errors (ERR), as a passing one is not.
func refused(err redis.Error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "NOPERM")
}

// pxOf is d for PX: whole milliseconds, rounded up, and at least one
// (Redis refuses PX 0), as go-redis sends a SET's expiration.
func pxOf(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return max(ms, 1)
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
func (s *Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (_ *idempotency.Record, err error) {
	start := time.Now()
	defer func() { s.warm(ctx, start, err) }()
	k := s.prefix + key
	if err := s.checkEviction(ctx, start, k); err != nil {
		return nil, err
	}
	data, err := json.Marshal(claim)
	if err != nil {
		return nil, err
	}
	// A key can expire between a failed SET NX and the GET; try again then.
	for range 3 {
		ok, err := s.c.SetNX(ctx, k, data, lease).Result()
		refused := err != nil && writesRefused(err)
		if err != nil && !refused {
			return nil, err
		}
		if ok {
			return nil, nil
		}
		// Refused, the server may still hold the key's record: a repeat is
		// replayed, or answered as in progress, rather than run again by a
		// guard that failed open (review149).
		found, gerr := s.c.Get(ctx, k).Bytes()
		switch {
		case errors.Is(gerr, redis.Nil) && refused:
			return nil, fmt.Errorf("%w: %w", idempotency.ErrWritesRefused, err)
		case errors.Is(gerr, redis.Nil):
			continue
		case gerr != nil && refused:
			return nil, err
		case gerr != nil:
			return nil, gerr
		}
		var rec idempotency.Record
		if err := json.Unmarshal(found, &rec); err != nil {
			return nil, err
		}
		if rec.Holds(claim) {
			return nil, nil // go-redis sent the SET again after its answer was lost
		}
		return &rec, nil
	}
	return nil, errors.New("idempotencystore: key kept expiring while claimed")
}

// writesRefused reports whether err is a server's refusal to write that
// leaves it reading: out of memory under noeviction (OOM), too few
// replicas (NOREPLICAS), a failed save (MISCONF), a read-only replica
// (READONLY).
func writesRefused(err error) bool {
	return redis.IsOOMError(err) || redis.IsNoReplicasError(err) || redis.IsReadOnlyError(err) || redis.HasErrorPrefix(err, "MISCONF")
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) (err error) {
	start := time.Now()
	defer func() { s.warm(ctx, start, err) }()
	old, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	n, err := replaceIfHeld.Run(ctx, s.c, []string{s.prefix + key}, old, data, pxOf(ttl)).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Renew implements [idempotency.Store].
func (s *Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (err error) {
	start := time.Now()
	defer func() { s.warm(ctx, start, err) }()
	old, err := json.Marshal(claim)
	if err != nil {
		return err
	}
	n, err := renewIfHeld.Run(ctx, s.c, []string{s.prefix + key}, old, pxOf(lease)).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key string, claim idempotency.Record) (err error) {
	start := time.Now()
	defer func() { s.warm(ctx, start, err) }()
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
