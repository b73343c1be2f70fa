// Package breakerstore keeps the fleet-wide state of shared circuit
// breakers in Redis (see breaker.Shared), so that the replicas of a service
// share a dependency's failure rate and open and close its breaker
// together.
//
// Each replica's flush is one round trip: a Lua script that adds its
// counts into the bucket of the server's current time (a hash per bucket,
// expiring after the window), records the outcome of its probes, decides
// from the window's totals whether the fleet breaker opens (a key holding
// when it opened, with its generation) or closes, grants a probe (an
// INCR'd counter per generation, expiring after the probe's time), and
// returns the state. A change of state is published, so that the other
// replicas flush at once instead of at their next tick (Watch). Time is the server's, so the replicas' clocks do not
// matter. A server restarted empty is a fleet with a closed breaker and
// no counts: sharing resumes at the next flush.
package breakerstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/internal/timeouts"
)

// Store is a breaker.SharedStore on Redis. It is safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

// New returns a Store keeping its keys in c under prefix ("breaker:" if
// empty). c must have ContextTimeoutEnabled, so that a flush's time bound
// holds against a frozen server; New panics otherwise.
func New(c redis.UniversalClient, prefix string) *Store {
	timeouts.Check("breakerstore.New", c)
	if prefix == "" {
		prefix = "breaker:"
	}
	return &Store{c: c, prefix: prefix}
}

// syncScript: KEYS[1] is the breaker's key prefix. ARGV: requests,
// failures, probe successes, probe failures, the generation they are for,
// want a probe (0/1), rate, min requests, window ms, buckets, open timeout
// ms, half-open requests, probe timeout ms. It returns {state, generation,
// probe granted}: state 0 closed, 1 half-open, 2 open.
var syncScript = redis.NewScript(`
local k = KEYS[1]
local req, fail = tonumber(ARGV[1]), tonumber(ARGV[2])
local pok, pbad, pgen = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local want = ARGV[6] == "1"
local rate, minreq = tonumber(ARGV[7]), tonumber(ARGV[8])
local window, buckets = tonumber(ARGV[9]), tonumber(ARGV[10])
local opent, halfopen, probet = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket = math.max(math.floor(window / buckets), 1)
local b = math.floor(now / bucket)
local gen = redis.call("GET", k .. ":gen") or "0"

local function clear(next_gen)
	for i = b - buckets + 1, b do redis.call("DEL", k .. ":b:" .. i) end
	redis.call("SET", k .. ":gen", next_gen)
	redis.call("PUBLISH", k .. ":changes", next_gen)
end

local opened = redis.call("GET", k .. ":open")

-- The outcomes of this replica's probes, if they are for this generation.
if pgen == gen and opened and now >= tonumber(opened) + opent then
	if pbad > 0 then
		opened = tostring(now)
		gen = tostring(tonumber(gen) + 1)
		redis.call("SET", k .. ":open", opened, "PX", 10 * opent + probet)
		clear(gen)
	elseif pok > 0 then
		local ok = redis.call("INCRBY", k .. ":ok:" .. gen, pok)
		redis.call("PEXPIRE", k .. ":ok:" .. gen, 10 * opent + probet)
		if ok >= halfopen then
			redis.call("DEL", k .. ":open")
			opened = false
			gen = tostring(tonumber(gen) + 1)
			clear(gen)
		end
	end
end

-- Counts, only while closed: a state change starts them afresh.
if not opened and req > 0 then
	redis.call("HINCRBY", k .. ":b:" .. b, "r", req)
	redis.call("HINCRBY", k .. ":b:" .. b, "f", fail)
	redis.call("PEXPIRE", k .. ":b:" .. b, window + bucket)
end

if not opened then
	local r, f = 0, 0
	for i = b - buckets + 1, b do
		local v = redis.call("HMGET", k .. ":b:" .. i, "r", "f")
		r = r + (tonumber(v[1]) or 0)
		f = f + (tonumber(v[2]) or 0)
	end
	if r >= minreq and f >= rate * r then
		opened = tostring(now)
		gen = tostring(tonumber(gen) + 1)
		redis.call("SET", k .. ":open", opened, "PX", 10 * opent + probet)
		clear(gen)
	end
end

if not opened then
	return {0, tonumber(gen), 0}
end
if now < tonumber(opened) + opent then
	return {2, tonumber(gen), 0}
end
local granted = 0
if want then
	local n = redis.call("INCR", k .. ":probes:" .. gen)
	redis.call("PEXPIRE", k .. ":probes:" .. gen, probet)
	if n <= halfopen then granted = 1 end
end
return {1, tonumber(gen), granted}
`)

// Watch implements breaker.SharedWatcher: it calls changed whenever the
// fleet breaker of name changes state, by Redis pub/sub, until ctx is
// done or the subscription fails.
func (s *Store) Watch(ctx context.Context, name string, changed func()) error {
	ps := s.c.Subscribe(ctx, s.prefix+"{"+name+"}:changes")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-ch:
			if !ok {
				return errors.New("breakerstore: subscription closed")
			}
			changed()
		}
	}
}

// Sync implements breaker.SharedStore.
func (s *Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	p := sy.Policy
	want := "0"
	if sy.WantProbe {
		want = "1"
	}
	res, err := syncScript.Run(ctx, s.c, []string{s.prefix + "{" + name + "}"},
		sy.Requests, sy.Failures, sy.ProbeSuccesses, sy.ProbeFailures, sy.Generation, want,
		p.Rate, p.MinRequests, p.Window.Milliseconds(), p.Buckets, p.OpenTimeout.Milliseconds(),
		p.HalfOpenRequests, p.ProbeTimeout.Milliseconds()).Int64Slice()
	if err != nil {
		return breaker.Fleet{}, err
	}
	if len(res) != 3 {
		return breaker.Fleet{}, fmt.Errorf("breakerstore: the script answered %v", res)
	}
	states := [...]breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open}
	if res[0] < 0 || res[0] > 2 {
		return breaker.Fleet{}, fmt.Errorf("breakerstore: the script answered state %d", res[0])
	}
	return breaker.Fleet{State: states[res[0]], Generation: uint64(res[1]), ProbeGranted: res[2] == 1}, nil
}
