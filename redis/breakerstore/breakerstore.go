// Package breakerstore keeps the fleet-wide state of shared circuit
// breakers in Redis (see breaker.Shared), so that the replicas of a service
// share a dependency's failure rate and open and close its breaker
// together.
//
// Each replica's flush is one round trip: a Lua script that adds its
// counts into the bucket of the server's current time (a hash per bucket,
// expiring after the window), if they were made in the fleet's current
// generation, records the outcome of its probes, decides from the window's
// totals whether the fleet breaker opens (a key holding when it opened,
// with its generation) or closes, grants probes (a hash per generation of
// the replicas holding one, at most HalfOpenRequests at once with the
// probes that succeeded; a replica holds one at most, gets it back if it
// asks again, gives it up when it neither holds nor runs nor wants one,
// and a grant expires three flush intervals after it was granted unless its
// replica says its probe runs), and returns the state. A batch
// of counts is applied once, so that a replica that got no answer can send
// it again. A change of state is published with the new state and
// generation, so that the other replicas take it at once instead of at
// their next flush (Watch), however slow their round trip. Time is the
// server's, so the replicas' clocks do not matter. A server restarted
// empty takes back the fleet's state from the first replica that flushes:
// open or half-open, as opened as long ago as that replica has known it,
// if the replica's store confirmed it recently, closed otherwise, under a
// generation never used before (the server's time in ms, or past the
// replica's); its counts start afresh. For three flush intervals after,
// a replica that knew a later generation than that first one (whose
// flush was formed before it heard a change) gives its view instead. A server that went back in time
// (restarted from an older snapshot) is told so by a replica that reports
// a newer generation than the one it holds, and starts a new generation
// likewise; every new generation is at least the server's time in ms, so
// none is used twice. Read tells
// the fleet's state and totals, for dashboards and tests.
//
// A breaker's keys are hashed to one slot (its name in braces), so the
// store works on a Redis Cluster (a *redis.ClusterClient) as on a single
// server; after a failure that is not a server's answer, it has the client
// learn the cluster's slots again, so that a failover is followed within
// a flush or two.
package breakerstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
// empty), which on a Redis Cluster must hold no braces: a breaker's keys
// are prefix{name}:..., which the name in braces keeps in one slot. c must
// have ContextTimeoutEnabled, so that a flush's time bound holds against a
// frozen server; New panics otherwise.
//
// A *redis.ClusterClient learns the slot map again after a failover by
// asking the nodes with no deadline but its ReadTimeout (3 s by default),
// a frozen master (SIGSTOP, a stalled VM) among them: sharing comes back
// up to that long after the failover instead of within a flush or two
// (4-5.6 s measured with the default, 0.04-0.26 s with 300 ms). Give a
// cluster client a ReadTimeout of at most [ClusterReadTimeout]; New logs
// a warning (slog) for one with more.
func New(c redis.UniversalClient, prefix string) *Store {
	timeouts.Check("breakerstore.New", c)
	if cc, ok := c.(*redis.ClusterClient); ok {
		if rt := cc.Options().ReadTimeout; rt <= 0 || rt > ClusterReadTimeout { // -1: none
			if rt == 0 {
				rt = 3 * time.Second // go-redis's default
			}
			slog.Warn("breakerstore: a cluster client's ReadTimeout is longer than breakerstore.ClusterReadTimeout: after a failover of a frozen master, the breakers share again only that long after",
				"read_timeout", rt.String(), "advised", ClusterReadTimeout.String())
		}
	}
	if prefix == "" {
		prefix = "breaker:"
	}
	return &Store{c: c, prefix: prefix}
}

// ClusterReadTimeout is the longest ReadTimeout of a cluster client with
// which the replicas share again within a second of a failover, the
// failed master frozen rather than gone (see [New]).
const ClusterReadTimeout = 500 * time.Millisecond

// syncScript: KEYS[1] is the breaker's key prefix. ARGV: batch, requests,
// failures, probe successes, probe failures, the generation and state the
// replica last saw (0 closed, 1 half-open, 2 open), want a probe (0/1), a
// probe running (0/1), rate, min requests, window ms, buckets, open
// timeout ms, half-open requests, probe timeout ms, the generation unknown
// (0/1: counts made before the replica heard any), own breaker half-open
// (0/1), flush interval ms, the replica's id, a probe grant held unused
// (0/1), how long the replica has known the fleet not closed (ms), how
// long ago the batch's counts began (ms, 0 not said). It returns {state,
// generation, probe granted (this replica holds one), the version of the
// mode set fleet-wide (Force), how long ago the fleet last changed state
// (ms, -1 unknown), the generation that change ended (0 unknown)}.
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
local unknown = ARGV[17] == "1" -- the replica had heard no generation: its counts are the current one's
local ownhalf, flushms = ARGV[18] == "1", tonumber(ARGV[19])
local replica, held, openedfor = ARGV[20], ARGV[21] == "1", tonumber(ARGV[22])
local countsage = tonumber(ARGV[23] or "0")
local keep = math.max(86400000, 3 * flushms) -- an open fleet stays so until probes close it (a day at most, if nobody asks, or three flush intervals)
local forcev = tonumber(redis.call("GET", k .. ":forcev") or "0") -- the version of a mode set fleet-wide (Force)

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket = math.max(math.floor(window / buckets), 1)
local b = math.floor(now / bucket)
local gen = redis.call("GET", k .. ":gen")
if gen then
	redis.call("PEXPIRE", k .. ":gen", keep) -- a name no replica flushes any more leaves no key behind
end
local function clearcounts()
	for i = b - buckets, b do redis.call("DEL", k .. ":b:" .. i) end
end
local opened = redis.call("GET", k .. ":open")
-- A time to come is now: a server whose clock went back (an NTP step, a
-- failover to a replica whose clock is behind the old master's) would
-- otherwise hold the fleet open, and a probe's grant, for as long again.
if opened and tonumber(opened) > now then
	opened = tostring(now)
	redis.call("SET", k .. ":open", opened, "KEEPTTL")
end
if tonumber(redis.call("GET", k .. ":since") or "0") > now then
	redis.call("SET", k .. ":since", tostring(now), "KEEPTTL")
end

-- Lost state (restarted empty): take back a replica's view of a fleet
-- that was not closed (it sends closed if its store has not confirmed it
-- recently), as opened as long ago as the replica has known it, under a
-- generation never used before: a replica cut off before brings back
-- counts of a generation that is not current.
-- A store that went back in time (restarted from an older snapshot, or a
-- failover that lost the last writes) holds a generation older than a
-- replica's: lost state too, so that counts of the generation it went back
-- to, from replicas cut off since, are not taken as current. Its counts
-- are that older generation's too (a window of failures that was later
-- opened on and recovered from): they are cleared.
local rolledback = gen and not unknown and tonumber(pgen) > tonumber(gen)
-- A server that restarted (its run_id changed: a restart, a failover) may
-- have come back from an older snapshot, which no replica that had heard
-- no generation can tell: its counts would join the snapshot's, failures
-- the fleet may since have opened on and recovered from. They are cleared
-- (counts lost, never added), whoever flushes first.
local info = redis.pcall("INFO", "server")
local run = type(info) == "string" and string.match(info, "run_id:(%x+)") or nil
if run then
	if redis.call("GET", k .. ":run") ~= run then
		clearcounts()
		redis.call("DEL", k .. ":prev") -- maybe of an older snapshot's changes (review155)
	end
	redis.call("SET", k .. ":run", run, "PX", keep)
end
if rolledback then
	redis.call("DEL", k .. ":open")
	opened = false
	clearcounts() -- as after a restart, whoever comes first
end
-- Takes back a replica's view of a fleet not closed, as opened as long
-- ago as the replica has known it. That is also the fleet's last change of
-- state, which the replicas' open timers run from: each restart of a crash
-- loop would move them on, the replicas taking the restore's new
-- generation for one.
local function reopened()
	opened = string.format("%d", now - math.max(openedfor, 0))
	redis.call("SET", k .. ":open", opened, "PX", keep)
	redis.call("SET", k .. ":since", opened, "PX", keep)
end
if not gen or rolledback then
	gen = string.format("%d", math.max(now, tonumber(pgen) + 1))
	redis.call("SET", k .. ":gen", gen, "PX", keep)
	if not unknown and tonumber(pgen) > 0 then -- a generation replacing one a replica knew: a change
		redis.call("SET", k .. ":since", tostring(now), "PX", keep)
	end
	if pstate ~= 0 then
		reopened()
	end
	redis.call("SET", k .. ":restored", string.format("%d %d", unknown and 0 or tonumber(pgen), tonumber(gen)), "PX", 3 * flushms)
	redis.call("DEL", k .. ":prev") -- not a change it saw
end

-- A change of state: the counts start afresh, and the replicas hear the
-- new state (2 open, 0 closed) and generation at once.
local function clear(next_gen, state)
	clearcounts()
	redis.call("DEL", k .. ":ok:" .. (redis.call("GET", k .. ":gen") or "")) -- the probes' successes of the generation that ends
	redis.call("DEL", k .. ":restored")
	-- The generation the change ends, with the one it begins: a change
	-- made by a script of an earlier version, which does not write it,
	-- leaves it naming another generation than the current one, and it
	-- is not told (review155).
	redis.call("SET", k .. ":prev", (redis.call("GET", k .. ":gen") or "0") .. " " .. next_gen, "PX", keep)
	redis.call("SET", k .. ":gen", next_gen, "PX", keep)
	redis.call("SET", k .. ":since", tostring(now), "PX", keep)
	redis.call("PUBLISH", k .. ":changes", next_gen .. " " .. state)
end

local function open()
	opened = tostring(now)
	gen = string.format("%d", math.max(tonumber(gen) + 1, now))
	redis.call("SET", k .. ":open", opened, "PX", keep)
	clear(gen, 2)
end

-- The state taken back is as recent as the view of the replica that
-- flushed first, which may be older than another's: a flush formed before
-- its replica heard the fleet's last change, sent again by the client once
-- the server is back. For three flush intervals, a replica that knew a
-- later generation than that one, from before the state was lost (below
-- the generation taken back: a later one it heard from the store since),
-- gives its view instead, if it differs: as a change, under a new
-- generation.
local restored = redis.call("GET", k .. ":restored")
local from, upto = -1, 0
if restored then
	from, upto = string.match(restored, "(%d+) (%d+)")
	from, upto = tonumber(from), tonumber(upto)
end
if from >= 0 and not unknown and tonumber(pgen) > from and tonumber(pgen) < upto and (pstate ~= 0) ~= (opened and true or false) then
	gen = string.format("%d", math.max(tonumber(gen) + 1, now))
	if pstate ~= 0 then
		clear(gen, 2)
		reopened()
	else
		redis.call("DEL", k .. ":open")
		opened = false
		clear(gen, 0)
	end
	redis.call("SET", k .. ":restored", string.format("%d %d", tonumber(pgen), upto), "PX", 3 * flushms)
end

-- A batch is applied once: a replica sends it again if it got no answer.
-- It counts only in the generation it was made in: a replica cut off
-- while the fleet opened and closed brings back counts of a state that is
-- over.
-- Counts of an unknown generation (a replica that had heard none) are the
-- current generation's, unless they began before the fleet last changed
-- state: a replica cut off from its start brings back an outage's counts.
local function since()
	return tonumber(redis.call("GET", k .. ":since") or "0")
end
local predates = unknown and countsage > 0 and now - countsage < since()
-- A replica numbers its batches, one after the other (breaker.Sync), so
-- its latest number applied is all there is to keep: one key a replica,
-- not one a flush for a window.
local function firsttime()
	if batch == "" then
		return true
	end
	local n = string.match(batch, "%-(%d+)$")
	if not n or string.sub(batch, 1, #replica + 1) ~= replica .. "-" then
		return redis.call("SET", k .. ":batch:" .. batch, 1, "NX", "PX", window + bucket)
	end
	local seen = k .. ":seq:" .. replica
	if tonumber(n) <= tonumber(redis.call("GET", seen) or "0") then
		return false
	end
	redis.call("SET", seen, n, "PX", window + bucket)
	return true
end
local fresh = (pgen == gen or (unknown and not predates)) and firsttime()
local gen0 = gen -- a probe's outcome below may close the fleet under a new one

-- A replica that reports its probe's outcome no longer holds its grant.
if fresh and (pok > 0 or pbad > 0) then
	redis.call("HDEL", k .. ":grants:" .. gen, replica)
end

-- The outcomes of this replica's probes, if they are for this generation.
if fresh and opened and now >= tonumber(opened) + opent then
	if pbad > 0 then
		open()
	elseif pok > 0 then
		local ok = redis.call("INCRBY", k .. ":ok:" .. gen, pok)
		redis.call("PEXPIRE", k .. ":ok:" .. gen, keep)
		if ok >= halfopen then
			redis.call("DEL", k .. ":open")
			opened = false
			gen = string.format("%d", math.max(tonumber(gen) + 1, now))
			clear(gen, 0)
		end
	end
end

-- Counts, only while closed: a change of state starts them afresh, and
-- the calls of the half-open generation a probe's success just closed
-- stay in it.
if fresh and not opened and req > 0 and gen == gen0 then
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

local changed = -1 -- how long ago the fleet last changed state (ms), -1 unknown
if since() > 0 then changed = now - since() end
local prev = 0 -- the generation it ended, 0 unknown
local pv = redis.call("GET", k .. ":prev")
if pv then
	local p, n = string.match(pv, "(%d+) (%d+)")
	if n and tonumber(n) == tonumber(gen) then prev = tonumber(p) end
end
if not opened then
	return {0, tonumber(gen), 0, forcev, changed, prev}
end
local eager = k .. ":eager:" .. gen
if now < tonumber(opened) + opent then
	if want and not ownhalf then
		redis.call("SET", eager, 1, "PX", 2 * flushms)
	end
	return {2, tonumber(gen), 0, forcev, changed, prev}
end
-- Half-open: grants of probes, one per replica at most, replica -> when
-- it expires; with the probes that succeeded, at most halfopen at once.
-- A grant expires three flush intervals after it was granted unless its
-- replica says its probe runs (then the probe's time, renewed at each
-- flush), and is given up by a replica that neither holds it unused, nor
-- runs a probe, nor wants one; a replica that asks again (the answer that
-- granted it was lost) gets it back.
local grants = k .. ":grants:" .. gen
local all = redis.call("HGETALL", grants)
local live, mine = 0, false
local longest = now + math.max(probet, 3 * flushms) -- the latest a grant made now expires: later, a clock gone back
for i = 1, #all, 2 do
	if tonumber(all[i + 1]) > longest then
		all[i + 1] = string.format("%d", longest)
		redis.call("HSET", grants, all[i], all[i + 1])
	end
	if tonumber(all[i + 1]) <= now then
		redis.call("HDEL", grants, all[i])
	elseif all[i] == replica then
		mine = true
	else
		live = live + 1
	end
end
if pgen ~= gen then
	running, held = false, false
end
if mine then
	if running then
		redis.call("HSET", grants, replica, string.format("%d", now + probet))
	elseif not held and not want then
		redis.call("HDEL", grants, replica)
		mine = false
	end
end
-- A replica whose own breaker is half-open may not reach the dependency:
-- it probes only if no replica whose own breaker is closed wants to (asked
-- in the last two flush intervals, while open too).
if want and not ownhalf then
	redis.call("SET", eager, 1, "PX", 2 * flushms)
elseif want and redis.call("EXISTS", eager) == 1 then
	want = false
end
local granted = 0
if mine then
	granted = 1
elseif want and live + tonumber(redis.call("GET", k .. ":ok:" .. gen) or "0") < halfopen then
	redis.call("HSET", grants, replica, string.format("%d", now + 3 * flushms))
	granted = 1
end
if granted == 1 then
	redis.call("PEXPIRE", grants, probet + 3 * flushms)
end
return {1, tonumber(gen), granted, forcev, changed, prev}
`)

// states are the fleet's states by their number in the scripts.
var states = [...]resilience.State{resilience.StateClosed, resilience.StateHalfOpen, resilience.StateOpen}

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
	res, err := syncScript.Run(ctx, s.c, []string{s.key(name)},
		sy.Batch, sy.Requests, sy.Failures, sy.ProbeSuccesses, sy.ProbeFailures, sy.Generation, state,
		flag(sy.WantProbe), flag(sy.ProbeRunning),
		p.Rate, p.MinRequests, p.Window.Milliseconds(), p.Buckets, p.OpenTimeout.Milliseconds(),
		p.HalfOpenRequests, p.ProbeTimeout.Milliseconds(), flag(sy.GenerationUnknown), flag(sy.OwnHalfOpen),
		max(p.FlushInterval.Milliseconds(), 1), sy.Replica, flag(sy.ProbeHeld), sy.OpenedFor.Milliseconds(), sy.CountsAge.Milliseconds()).Int64Slice()
	if err != nil {
		s.reload(err)
		return breaker.Fleet{}, err
	}
	if len(res) != 6 || res[0] < 0 || res[0] > 2 {
		return breaker.Fleet{}, fmt.Errorf("breakerstore: the script answered %v", res)
	}
	fl := breaker.Fleet{State: states[res[0]], Generation: uint64(res[1]), ProbeGranted: res[2] == 1, ForceVersion: uint64(res[3]), Previous: uint64(res[5])}
	if res[4] >= 0 {
		fl.ChangedFor = max(time.Duration(res[4])*time.Millisecond, time.Millisecond)
	}
	return fl, nil
}

// Watch implements breaker.SharedWatcher: it calls changed with the new
// state and generation whenever the fleet breaker of name opens or
// closes, by Redis pub/sub, until ctx is done or the subscription fails.
// The change travels as data: a replica whose round trip is too slow for
// its flushes still learns it.
func (s *Store) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	ps := s.c.Subscribe(ctx) // no channel yet: no connection
	// go-redis heeds a context's deadline, not its cancellation: a new
	// connection's handshake waits for a server that does not answer (a
	// frozen node) as long as the client's read timeout. It is made apart,
	// so that Watch, and the breaker's Close, end with ctx; a subscription
	// made after that is closed at once.
	made := make(chan error, 1)
	go func() { made <- ps.Subscribe(ctx, s.key(name)+":changes") }()
	select {
	case <-ctx.Done():
		go func() { <-made; _ = ps.Close() }()
		return ctx.Err()
	case err := <-made:
		if err != nil {
			_ = ps.Close()
			s.reload(err)
			return err
		}
	}
	// The receiving runs apart too: go-redis reconnects inside
	// ReceiveTimeout, under the PubSub's lock, after a broken connection,
	// and heeds neither ctx's cancellation nor Close meanwhile: a dial
	// bounded by the client's DialTimeout, then a handshake with a silent
	// server bounded by its ReadTimeout. Watch returns with ctx; the
	// receiver ends at most that long after (Close takes the lock once
	// the reconnection is over, and the read on the new connection fails
	// at once), and closes the subscription.
	ended := make(chan error, 1)
	go func() {
		defer ps.Close()
		ended <- s.receive(ctx, ps, changed)
	}()
	select {
	case <-ctx.Done():
		// A blocked read ends with the subscription, closed here before
		// Watch returns: an AfterFunc of ctx, stopped as Watch returned,
		// could be stopped before it ran, and the receiver then read on,
		// subscribed, until its timeout (5 s after the breaker's Close,
		// review147).
		_ = ps.Close()
		return ctx.Err()
	case err := <-ended:
		return err
	}
}

// receive takes the subscription's confirmation, then the changes, until
// ctx is done or the subscription fails.
func (s *Store) receive(ctx context.Context, ps *redis.PubSub, changed func(breaker.Fleet)) error {
	if _, err := ps.ReceiveTimeout(ctx, 2*pingEvery()); err != nil { // the subscription's confirmation, on a link that answers
		s.reload(err)
		return err
	}
	// Received here, not through go-redis's channel, which reconnects by
	// itself, to a node that a failover removed as often as not: a failure
	// ends Watch, the breaker watches again, and a cluster client learns
	// the slots again first.
	// A silent link (a partition, a proxy that drops the traffic but keeps
	// the connection, a frozen node) shows as a ping not answered within
	// one more period: Watch ends, and the breaker subscribes again.
	pinged := false // a ping not answered yet
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if pinged { // a link that went silent: no answer to the last ping
				err := errors.New("breakerstore: no answer to a ping on the subscription")
				s.reload(err)
				return err
			}
			if err := ps.Ping(ctx); err != nil { // the link still there?
				s.reload(err)
				return err
			}
			pinged = true
			continue
		}
		if err != nil {
			s.reload(err)
			return err
		}
		pinged = false
		if m, ok := msg.(*redis.Message); ok {
			if f, ok := parseChange(m.Payload); ok {
				changed(f)
			}
		}
	}
}

// watchPing is how long Watch waits for a message before it pings, and
// then for the answer; pingPeriod, if set, replaces it (tests).
const watchPing = 5 * time.Second

var pingPeriod atomic.Int64

func pingEvery() time.Duration {
	if d := pingPeriod.Load(); d > 0 {
		return time.Duration(d)
	}
	return watchPing
}

// parseChange reads a published change: "generation state", the state 0
// (closed) or 2 (open). It says no Previous: the replicas of an earlier
// version read no other format (review155).
func parseChange(p string) (breaker.Fleet, bool) {
	g, st, ok := strings.Cut(p, " ")
	if !ok {
		return breaker.Fleet{}, false
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return breaker.Fleet{}, false
	}
	switch st {
	case "0":
		return breaker.Fleet{State: resilience.StateClosed, Generation: gen}, true
	case "2":
		return breaker.Fleet{State: resilience.StateOpen, Generation: gen}, true
	}
	return breaker.Fleet{}, false
}

// readScript: KEYS[1] is the breaker's key prefix; ARGV: window ms,
// buckets, open timeout ms. It returns {state, generation, requests,
// failures}, the totals of the window, and changes nothing.
var readScript = redis.NewScript(`
local k = KEYS[1]
local window, buckets, opent = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket = math.max(math.floor(window / buckets), 1)
local b = math.floor(now / bucket)
local gen = tonumber(redis.call("GET", k .. ":gen") or "0")
local opened = redis.call("GET", k .. ":open")
local r, f = 0, 0
for i = b - buckets + 1, b do
	local v = redis.call("HMGET", k .. ":b:" .. i, "r", "f")
	r = r + (tonumber(v[1]) or 0)
	f = f + (tonumber(v[2]) or 0)
end
local state = 0
if opened then
	state = 2
	if now >= math.min(tonumber(opened), now) + opent then state = 1 end -- a time to come is now, as in syncScript
end
return {state, gen, r, f}
`)

// Read implements breaker.SharedReader: the fleet breaker's state and its
// totals in the window, from one script that changes nothing.
func (s *Store) Read(ctx context.Context, name string, p breaker.FleetPolicy) (breaker.FleetStatus, error) {
	res, err := readScript.Run(ctx, s.c, []string{s.key(name)}, p.Window.Milliseconds(), p.Buckets, p.OpenTimeout.Milliseconds()).Int64Slice()
	if err != nil {
		s.reload(err)
		return breaker.FleetStatus{}, err
	}
	if len(res) != 4 || res[0] < 0 || res[0] > 2 {
		return breaker.FleetStatus{}, fmt.Errorf("breakerstore: the script answered %v", res)
	}
	return breaker.FleetStatus{State: states[res[0]], Generation: uint64(res[1]), Requests: uint64(res[2]), Failures: uint64(res[3])}, nil
}

// forceScript: KEYS[1] is the breaker's key prefix, ARGV[1] the mode as
// "mode at-ms by", ARGV[2] the newest version the replica took. It keeps
// the mode under a new version, which the next answer to every replica's
// Sync carries: the server's time in ms, or past the last version and the
// replica's, so that a server restarted empty, or whose clock is behind,
// does not give a new mode an older version than a replica took (it would
// write its own back over it).
var forceScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call("GET", KEYS[1] .. ":forcev") or "0")
local v = string.format("%d", math.max(now, last + 1, tonumber(ARGV[2]) + 1))
redis.call("SET", KEYS[1] .. ":force", ARGV[1])
redis.call("SET", KEYS[1] .. ":forcev", v)
return v
`)

// restoreScript: KEYS[1] is the breaker's key prefix, ARGV[1] the mode as
// forceScript takes it, ARGV[2] its version. It keeps the mode under that
// version unless the store holds one at least as new.
var restoreScript = redis.NewScript(`
if tonumber(redis.call("GET", KEYS[1] .. ":forcev") or "0") >= tonumber(ARGV[2]) then
	return 0
end
redis.call("SET", KEYS[1] .. ":force", ARGV[1])
redis.call("SET", KEYS[1] .. ":forcev", ARGV[2])
return 1
`)

// Force implements breaker.SharedForcer: it keeps f as the fleet's mode of
// the breaker called name (for ever: a forced mode lasts until someone
// changes it), and every replica takes it at its next flush.
func (s *Store) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	return s.runForce(ctx, forceScript, name, f, after)
}

// Restore implements breaker.SharedForcer: it keeps f under version, as a
// replica took it, unless Redis holds a newer one: after Redis went back
// in time (restarted empty, or from an older snapshot).
func (s *Store) Restore(ctx context.Context, name string, f breaker.Forcing, version uint64) error {
	return s.runForce(ctx, restoreScript, name, f, version)
}

func (s *Store) runForce(ctx context.Context, script *redis.Script, name string, f breaker.Forcing, version uint64) error {
	v := strconv.Itoa(int(f.Mode)) + " " + strconv.FormatInt(f.At.UnixMilli(), 10) + " " + f.By
	if err := script.Run(ctx, s.c, []string{s.key(name)}, v, strconv.FormatUint(version, 10)).Err(); err != nil {
		s.reload(err)
		return err
	}
	return nil
}

// Forced implements breaker.SharedForcer: the fleet's mode of the breaker
// called name and its version, the zero Forcing and 0 if none was set.
func (s *Store) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	vals, err := s.c.MGet(ctx, s.key(name)+":force", s.key(name)+":forcev").Result()
	if err != nil {
		s.reload(err)
		return breaker.Forcing{}, 0, err
	}
	v, ok := vals[0].(string)
	if !ok {
		return breaker.Forcing{}, 0, nil
	}
	version, err0 := strconv.ParseUint(fmt.Sprint(vals[1]), 10, 64)
	m, rest, _ := strings.Cut(v, " ")
	at, by, _ := strings.Cut(rest, " ")
	mode, err1 := strconv.Atoi(m)
	ms, err2 := strconv.ParseInt(at, 10, 64)
	if err0 != nil || err1 != nil || err2 != nil || mode < 0 || mode > int(breaker.Disabled) {
		return breaker.Forcing{}, 0, fmt.Errorf("breakerstore: a forced mode of %q, version %v", v, vals[1])
	}
	return breaker.Forcing{Mode: breaker.Mode(mode), By: by, At: time.UnixMilli(ms)}, version, nil
}

// reload makes a cluster client learn the cluster's slots again after a
// failure that is not a server's answer (a node gone: a failover may have
// moved the breaker's slot to another node). go-redis does so by itself
// only on a MOVED answer, and every minute.
func (s *Store) reload(err error) {
	var answer redis.Error
	if c, ok := s.c.(*redis.ClusterClient); ok && !errors.As(err, &answer) {
		c.ReloadState(context.Background())
	}
}

// key is the prefix of the keys of the breaker called name: its name in
// braces, so that a Redis Cluster keeps them all in one slot, which a
// script needs. The slot is the hash of what lies between the first {
// and the next }, or of the whole key if that is empty: a name that is
// empty or begins with } (or with the NUL byte that marks the others)
// goes in after a NUL byte.
func (s *Store) key(name string) string {
	if name == "" || name[0] == '}' || name[0] == 0 {
		name = "\x00" + name
	}
	return s.prefix + "{" + name + "}"
}
