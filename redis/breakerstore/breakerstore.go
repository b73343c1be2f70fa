// Package breakerstore keeps the fleet-wide state of shared circuit
// breakers in Redis (see breaker.Shared), so that the replicas of a service
// share a dependency's failure rate and open and close its breaker
// together.
//
// Each replica's flush is one round trip: a Lua script that adds its
// counts into the bucket of the server's current time (a hash per bucket,
// expiring after the window), records the outcome of its probes, decides
// from the window's totals whether the fleet breaker opens (a key holding
// when it opened, with its generation) or closes, grants probes (a counter
// per generation, at most HalfOpenRequests, expiring after the probe's time
// unless the replica running one says it still runs), and returns the
// state. A batch of counts is applied once, so that a replica that got no
// answer can send it again. A change of state is published, so that the other
// replicas flush at once instead of at their next tick (Watch). Time is the server's, so the replicas' clocks do not
// matter. A server restarted empty takes back the fleet's state from the
// first replica that saw it open or half-open, as opened then; its counts
// start afresh.
package breakerstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/internal/timeouts"
	"github.com/resiliencekit/resiliencekit/resilience"
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

// syncScript: KEYS[1] is the breaker's key prefix. ARGV: batch, requests,
// failures, probe successes, probe failures, the generation and state the
// replica last saw (0 closed, 1 half-open, 2 open), want a probe (0/1), a
// probe running (0/1), rate, min requests, window ms, buckets, open
// timeout ms, half-open requests, probe timeout ms. It returns {state,
// generation, probe granted}.
var syncScript = redis.NewScript(`
local k = KEYS[1]
local batch = ARGV[1]
local req, fail = tonumber(ARGV[2]), tonumber(ARGV[3])
local pok, pbad = tonumber(ARGV[4]), tonumber(ARGV[5])
local pgen, pstate = ARGV[6], tonumber(ARGV[7])
local want, running = ARGV[8] == "1", ARGV[9] == "1"
local rate, minreq = tonumber(ARGV[10]), tonumber(ARGV[11])
local window, buckets = tonumber(ARGV[12]), tonumber(ARGV[13])
local opent, halfopen, probet = tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local keep = 86400000 -- an open fleet stays so until probes close it (a day at most, if nobody asks)

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket = math.max(math.floor(window / buckets), 1)
local b = math.floor(now / bucket)
local gen = redis.call("GET", k .. ":gen")
local opened = redis.call("GET", k .. ":open")

-- Lost state (restarted empty): take back a replica's view of a fleet
-- that was not closed, as opened now.
if not gen then
	gen = pgen
	redis.call("SET", k .. ":gen", gen)
	if pstate ~= 0 then
		opened = tostring(now)
		redis.call("SET", k .. ":open", opened, "PX", keep)
	end
end

local function clear(next_gen)
	for i = b - buckets + 1, b do redis.call("DEL", k .. ":b:" .. i) end
	redis.call("SET", k .. ":gen", next_gen)
	redis.call("PUBLISH", k .. ":changes", next_gen)
end

local function open()
	opened = tostring(now)
	gen = tostring(tonumber(gen) + 1)
	redis.call("SET", k .. ":open", opened, "PX", keep)
	clear(gen)
end

-- A batch is applied once: a replica sends it again if it got no answer.
local fresh = batch == "" or redis.call("SET", k .. ":batch:" .. batch, 1, "NX", "PX", window + bucket)

-- The outcomes of this replica's probes, if they are for this generation.
if fresh and pgen == gen and opened and now >= tonumber(opened) + opent then
	if pbad > 0 then
		open()
	elseif pok > 0 then
		local ok = redis.call("INCRBY", k .. ":ok:" .. gen, pok)
		redis.call("PEXPIRE", k .. ":ok:" .. gen, keep)
		if ok >= halfopen then
			redis.call("DEL", k .. ":open")
			opened = false
			gen = tostring(tonumber(gen) + 1)
			clear(gen)
		end
	end
end

-- Counts, only while closed: a change of state starts them afresh.
if fresh and not opened and req > 0 then
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
		open()
	end
end

if not opened then
	return {0, tonumber(gen), 0}
end
if now < tonumber(opened) + opent then
	return {2, tonumber(gen), 0}
end
-- Half-open: grants of probes, at most halfopen a generation; they
-- expire after the probe's time unless their replicas say they still run.
local probes = k .. ":probes:" .. gen
if running and pgen == gen then
	redis.call("PEXPIRE", probes, probet)
end
local granted = 0
if want then
	local n = redis.call("INCR", probes)
	if n == 1 then redis.call("PEXPIRE", probes, probet) end
	if n <= halfopen then granted = 1 else redis.call("DECR", probes) end
end
return {1, tonumber(gen), granted}
`)

// Sync implements breaker.SharedStore.
func (s *Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	p := sy.Policy
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	state := map[resilience.State]int{resilience.StateClosed: 0, resilience.StateHalfOpen: 1, resilience.StateOpen: 2}[sy.State]
	res, err := syncScript.Run(ctx, s.c, []string{s.prefix + "{" + name + "}"},
		sy.Batch, sy.Requests, sy.Failures, sy.ProbeSuccesses, sy.ProbeFailures, sy.Generation, state,
		flag(sy.WantProbe), flag(sy.ProbeRunning),
		p.Rate, p.MinRequests, p.Window.Milliseconds(), p.Buckets, p.OpenTimeout.Milliseconds(),
		p.HalfOpenRequests, p.ProbeTimeout.Milliseconds()).Int64Slice()
	if err != nil {
		return breaker.Fleet{}, err
	}
	if len(res) != 3 || res[0] < 0 || res[0] > 2 {
		return breaker.Fleet{}, fmt.Errorf("breakerstore: the script answered %v", res)
	}
	states := [...]resilience.State{resilience.StateClosed, resilience.StateHalfOpen, resilience.StateOpen}
	return breaker.Fleet{State: states[res[0]], Generation: uint64(res[1]), ProbeGranted: res[2] == 1}, nil
}

// Watch implements breaker.SharedWatcher: it calls changed whenever the
// fleet breaker of name changes state, by Redis pub/sub, until ctx is
// done or the subscription fails.
func (s *Store) Watch(ctx context.Context, name string, changed func()) error {
	ps := s.c.Subscribe(ctx, s.prefix+"{"+name+"}:changes")
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // a blocked read ends with ctx
	defer stop()
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
