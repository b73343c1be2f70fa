package breakerstore_test

// review155: a fleet in a rolling upgrade, replicas of the version before
// the :prev change beside replicas of this one, on one Redis. The old
// replicas run the old script (below, taken from the diff, unchanged but
// for the name) and the old message parser.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review155OldSync is breakerstore.Store.Sync of the version before the
// change (5 values, no :prev).
func review155OldSync(ctx context.Context, c redis.UniversalClient, prefix, name string, sy breaker.Sync) (breaker.Fleet, error) {
	p := sy.Policy
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	state := map[resilience.State]int{resilience.StateClosed: 0, resilience.StateHalfOpen: 1, resilience.StateOpen: 2}[sy.State]
	res, err := review155OldSyncScript.Run(ctx, c, []string{prefix + "{" + name + "}"},
		sy.Batch, sy.Requests, sy.Failures, sy.ProbeSuccesses, sy.ProbeFailures, sy.Generation, state,
		flag(sy.WantProbe), flag(sy.ProbeRunning),
		p.Rate, p.MinRequests, p.Window.Milliseconds(), p.Buckets, p.OpenTimeout.Milliseconds(),
		p.HalfOpenRequests, p.ProbeTimeout.Milliseconds(), flag(sy.GenerationUnknown), flag(sy.OwnHalfOpen),
		max(p.FlushInterval.Milliseconds(), 1), sy.Replica, flag(sy.ProbeHeld), sy.OpenedFor.Milliseconds(), sy.CountsAge.Milliseconds()).Int64Slice()
	if err != nil {
		return breaker.Fleet{}, err
	}
	if len(res) != 5 {
		return breaker.Fleet{}, fmt.Errorf("old script answered %v", res)
	}
	states := [...]resilience.State{resilience.StateClosed, resilience.StateHalfOpen, resilience.StateOpen}
	return breaker.Fleet{State: states[res[0]], Generation: uint64(res[1]), ProbeGranted: res[2] == 1, ForceVersion: uint64(res[3])}, nil
}

// review155OldParseChange is the old version's parseChange.
func review155OldParseChange(p string) (breaker.Fleet, bool) {
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

func review155Policy() breaker.FleetPolicy {
	return breaker.FleetPolicy{Rate: 0.5, MinRequests: 2, Window: 10 * time.Second, Buckets: 10,
		OpenTimeout: 100 * time.Millisecond, HalfOpenRequests: 1, ProbeTimeout: 300 * time.Millisecond,
		FlushInterval: 100 * time.Millisecond}
}

// TestReview155MixedVersionsLeaveAStalePrevious: Fleet.Previous is "the
// generation that the fleet's last change of state ended". In a rolling
// upgrade, a change made by an old replica's script leaves :prev as the
// new script last set it: the new replicas are then told that the last
// closing ended a generation it did not end, and a vouching replica whose
// held counts are of that generation counts them in a later closing (the
// review153 failure the change was made against).
func TestReview155MixedVersionsLeaveAStalePrevious(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	c := srv.Client()
	ctx := t.Context()
	const prefix, name = "r155:", "mixed"
	s := breakerstore.New(c, prefix)
	p := review155Policy()
	newSync := func(sy breaker.Sync) breaker.Fleet {
		t.Helper()
		sy.Policy = p
		f, err := s.Sync(ctx, name, sy)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	oldSync := func(sy breaker.Sync) breaker.Fleet {
		t.Helper()
		sy.Policy = p
		f, err := review155OldSync(ctx, c, prefix, name, sy)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	g0 := newSync(breaker.Sync{GenerationUnknown: true, Replica: "N"}).Generation
	// The new replica's failures open the fleet, its probe closes it.
	f := newSync(breaker.Sync{Batch: "N-1", Requests: 4, Failures: 4, Generation: g0, Replica: "N"})
	if f.State != resilience.StateOpen {
		t.Fatalf("not opened: %+v", f)
	}
	g1 := f.Generation
	time.Sleep(150 * time.Millisecond)
	f = newSync(breaker.Sync{Generation: g1, State: resilience.StateOpen, WantProbe: true, Replica: "N"})
	if f.State != resilience.StateHalfOpen || !f.ProbeGranted {
		t.Fatalf("not half-open with a grant: %+v", f)
	}
	f = newSync(breaker.Sync{Batch: "N-2", ProbeSuccesses: 1, Generation: g1, State: resilience.StateHalfOpen, Replica: "N"})
	if f.State != resilience.StateClosed || f.Previous != g1 {
		t.Fatalf("the probe did not close g1 (%d): %+v", g1, f)
	}
	g2 := f.Generation
	// An old replica: its failures open the fleet, its probe closes it.
	f = oldSync(breaker.Sync{Batch: "O-1", Requests: 4, Failures: 4, Generation: g2, Replica: "O"})
	if f.State != resilience.StateOpen {
		t.Fatalf("old: not opened: %+v", f)
	}
	g3 := f.Generation
	time.Sleep(150 * time.Millisecond)
	f = oldSync(breaker.Sync{Generation: g3, State: resilience.StateOpen, WantProbe: true, Replica: "O"})
	if f.State != resilience.StateHalfOpen || !f.ProbeGranted {
		t.Fatalf("old: not half-open with a grant: %+v", f)
	}
	f = oldSync(breaker.Sync{Batch: "O-2", ProbeSuccesses: 1, Generation: g3, State: resilience.StateHalfOpen, Replica: "O"})
	if f.State != resilience.StateClosed {
		t.Fatalf("old: the probe did not close: %+v", f)
	}
	g4 := f.Generation
	// A new replica flushes: the last change ended g3 (or the store does
	// not know: 0), never g1.
	f = newSync(breaker.Sync{Generation: g4, Replica: "N"})
	t.Logf("generations g1=%d g2=%d g3=%d g4=%d; answer %+v", g1, g2, g3, g4, f)
	if f.Generation != g4 || f.State != resilience.StateClosed {
		t.Fatalf("answer %+v, want closed g4", f)
	}
	if f.Previous == g1 {
		t.Errorf("Previous = %d (g1, ended two changes ago): a replica holding counts of g1 counts them in g4, a later closing; want %d or 0", f.Previous, g3)
	} else if f.Previous != g3 && f.Previous != 0 {
		t.Errorf("Previous = %d, want %d or 0", f.Previous, g3)
	}
}

// TestReview155OldReplicasParseNewMessages: a replica of the version
// before the change, subscribed to the same channel, must still take the
// changes that a replica of this version publishes (the doc promises a
// replica learns an opening within a one-way trip): the message has a
// third field now.
func TestReview155OldReplicasParseNewMessages(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no")
	c := srv.Client()
	ctx := t.Context()
	const prefix, name = "r155:", "parse"
	ps := c.Subscribe(ctx, prefix+"{"+name+"}:changes")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s := breakerstore.New(c, prefix)
	p := review155Policy()
	f, err := s.Sync(ctx, name, breaker.Sync{GenerationUnknown: true, Replica: "N", Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(ctx, name, breaker.Sync{Batch: "N-1", Requests: 4, Failures: 4, Generation: f.Generation, Replica: "N", Policy: p}); err != nil {
		t.Fatal(err)
	}
	msg, err := ps.ReceiveTimeout(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := msg.(*redis.Message)
	if !ok {
		t.Fatalf("got %T", msg)
	}
	if got, ok := review155OldParseChange(m.Payload); !ok || got.State != resilience.StateOpen {
		t.Errorf("an old replica's parser drops the new message %q (ok=%v): during a rolling upgrade the old replicas learn no change by pub/sub, only at their next flush", m.Payload, ok)
	}
}

var review155OldSyncScript = redis.NewScript(`
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
end

-- A change of state: the counts start afresh, and the replicas hear the
-- new state (2 open, 0 closed) and generation at once.
local function clear(next_gen, state)
	clearcounts()
	redis.call("DEL", k .. ":ok:" .. (redis.call("GET", k .. ":gen") or "")) -- the probes' successes of the generation that ends
	redis.call("DEL", k .. ":restored")
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
if not opened then
	return {0, tonumber(gen), 0, forcev, changed}
end
local eager = k .. ":eager:" .. gen
if now < tonumber(opened) + opent then
	if want and not ownhalf then
		redis.call("SET", eager, 1, "PX", 2 * flushms)
	end
	return {2, tonumber(gen), 0, forcev, changed}
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
return {1, tonumber(gen), granted, forcev, changed}
`)
