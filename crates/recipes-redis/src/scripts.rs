//! The Lua scripts: every verb that touches more than one key is one
//! script, so it is atomic and one round trip (`EVALSHA`, loaded again on
//! `NOSCRIPT` by the `redis` crate); the queue's verbs, run on every
//! acquisition and release, are the functions of one library instead
//! (`FCALL`: [`crate::queue_scripts`]), built from the same helpers.
//!
//! Keys, all below one hash-tagged prefix `{recipes}:` (`ns`), so that a
//! cluster would keep them in one slot:
//!
//! | key | what |
//! |---|---|
//! | `ns sessions` | the last session id (minted as a fence is) |
//! | `ns s:<id>` | a session: a random token, `PX` the TTL |
//! | `ns deadlines` | the live sessions, a sorted set: id → when its key expires (ms, the server's clock) |
//! | `ns h:<id>` | the session's entries: member → `<queue>\n<hold key>`; a group member `g\n<group>\n<id>` → empty. No TTL: removed by the sweep |
//! | `ns q:<queue>` | the queue, a sorted set: member → its place, one above the last member's |
//! | `ns v:<queue>` | the members' values (a candidate's) |
//! | `ns r:<name>` | a read-write lock's roles: member → `read` \| `write` |
//! | `ns lock:<name>` | the lock: the holder's member, no TTL: live while its session key is |
//! | `ns rw:<name>:<member>` | a held read or write side: `<member> <fence>`, the fence minted for it; otherwise as the lock |
//! | `ns permit:<sem>/leases:<member>` | a held permit, as a side |
//! | `ns fence:<queue>` | the queue's last fence, never deleted |
//! | `ns size:<sem>` | a semaphore's size |
//!
//! A member is `<session id>-<uuid>`: made by the client before it is
//! sent, and naming its session. An entry, and a hold, is live while its
//! session key exists: the one renewal of a session keeps all of them, and
//! a hold of an expired session is free to the next taker. Dead entries
//! are swept by the next listing (their hold keys with them). Going
//! entries are published on `ns gone:<member>` (the waiter behind a lock
//! entry listens there; not when the queue is left empty) and
//! `ns wake:<queue>` (a permit waiter, an observer); an entry's coming
//! only on `wake:` and only for an election's candidate (a new leader for
//! its observers: nobody waits for a coming, and the rest show at an
//! observer's next poll).
//!
//! **The sweep.** No key of a session has a TTL but its session key:
//! every one is listed in the session's index `h:<id>`, and the index
//! under the session's id in `deadlines`. The session's one renewal
//! (every TTL/3, the same few commands whatever the number held) sets its
//! deadline and then sweeps: up to 16 sessions whose deadline passed and
//! whose key is gone, up to 512 of their entries, each removed only while
//! it is still that session's and its going published as a release's;
//! then the index and the deadline go. A grant sweeps too. So with any
//! live client on the server, a crashed holder's keys are gone within
//! TTL/3 of its session key's expiry (and its lock is free to a taker
//! from that expiry on); with none, at the next connect.
//!
//! `ENTER` takes too when ours holds at once (`take`, as `CONFIRM`
//! does): into an empty queue (which the probe of the name's other
//! recipes' keys shows, the queue's key among them) it reads nothing
//! more, sets the hold key and mints the fence, so an uncontended lock is
//! one script and its release another: 15 commands in all, the two
//! `FCALL`s counted (`redis_keepalive.rs`).
//!
//! A read-write lock is the mutex's queue `ns q:<name>` with each
//! member's role beside it (`ns r:<name>`, which exists while it has
//! members): a name's queue is one recipe's, and each side's `ENTER`
//! refuses a name whose queue has live members of the other. Several
//! readers hold at once, so each holder has its own hold key, live while its
//! session is, as a permit's. `CONFIRM` decides the
//! read-write rule itself: a reader holds when no live member ahead of it
//! is a writer (a member without a role counts as one), a writer when no
//! live member is ahead; it mints the fence from the name's one counter
//! in the same script, so readers' and writers' fences are one increasing
//! sequence. A reader waits on the nearest writer ahead, a writer on the
//! member just ahead (`gone:<member>`). `DOWNGRADE` turns a holding
//! writer's role into `read` in place (same member, place and hold key)
//! and publishes on its `gone:` channel, where the readers queued behind
//! it up to the next writer wait.
//!
//! Fences and session ids are **minted** (`mint`) on a hybrid clock: the
//! larger of the last one + 1 and the server's `TIME` in microseconds
//! since the Unix epoch, `SET … GET` swapping it in (exact in Lua's doubles until the year 2255;
//! stored with `%.0f`, never `tostring`, which writes `1.7e+15`). Each
//! value minted is at most the server's clock when it was minted, so
//! after the data is lost (`FLUSHALL`, a restart without persistence, an
//! older snapshot) the next one — the clock then — is above every one
//! handed out before; with the data intact the `+ 1` keeps them strictly
//! increasing even when the clock steps back. Redis 7 replicates a
//! script's effects, so `TIME` is allowed in a script that writes.
//!
//! Scripts that only delete or extend run under `maxmemory` too
//! (`allow-oom`); the rest are refused whole when Redis is out of memory,
//! before they write anything.

use std::sync::LazyLock;

use redis::Script;

use crate::names::NS;

/// Lua's one reading of a hold key's value, for every script and the
/// fenced scripts of callers ([`fenced_body`]); Rust's is
/// [`holds`](crate::names::holds).
macro_rules! named {
    () => {
        r#"
-- The member a hold key's value `v` names, and the fence it keeps: a
-- lock's value is its holder's member; a permit's or a read-write lock
-- member's, `<member> <fence>` (a member has no space). nil: no value.
local function named(v)
  if not v then return nil end
  local m, f = string.match(v, '^(%S*) (%d+)$')
  if m then return m, f end
  return v
end
"#
    };
}

/// What every script shares: removing an entry and saying so.
macro_rules! common {
    () => {
        concat!(
            r#"
local ns = ARGV[1]
local function sid_of(m) return string.match(m, '^(%d+)-') or '0' end
local function sess(m) return ns .. 's:' .. sid_of(m) end
-- A queue entry's value `v` in its session's index (`h:<id>`): its queue
-- and its hold key; nothing for another value (a group member's, none).
local function entry_of(v) if v then return string.match(v, '^(.-)\n(.*)$') end end
-- Member m's entry in its session's index, as `entry_of` reads it.
local function index_entry(m) return entry_of(redis.call('HGET', ns .. 'h:' .. sid_of(m), m)) end
"#,
            $crate::scripts::named!(),
            r#"-- Remove member `m` of queue `q` whose hold key is `k`. `held`: whether
-- `k` is m's and is to be deleted (nil: read it). `own` (optional): m is
-- the caller's own member, so only its hash of `own` ('v' or 'r') can
-- have its field, and the queue's `wake` channel has no listener when
-- `own` is 'r' (a read-write lock has no observers).
local function drop(q, k, m, held, own)
  local qk = ns .. 'q:' .. q
  redis.call('ZREM', qk, m)
  local left = redis.call('ZCARD', qk)
  redis.call('HDEL', ns .. 'h:' .. sid_of(m), m)
  -- A barrier's member has no hold key (''): nothing to read, and an ACL
  -- user's grant (our keys only) refuses a read of ''.
  if held == nil then held = k ~= '' and named(redis.call('GET', k)) == m end
  if left > 0 then
    if held then redis.call('DEL', k) end
    if own ~= 'r' then redis.call('HDEL', ns .. 'v:' .. q, m) end
    if own ~= 'v' then redis.call('HDEL', ns .. 'r:' .. q, m) end
    redis.call('PUBLISH', ns .. 'gone:' .. m, q)
  else
    -- A double barrier's flag too (`ready:`): a member joins above an old
    -- one, and one left by members that all died would refuse a plain
    -- barrier of the name for good.
    -- The hold key (when held) in the same DEL.
    local gone = {ns .. 'v:' .. q, ns .. 'r:' .. q, ns .. 'n:' .. q, ns .. 'ready:' .. q}
    if held then gone[#gone + 1] = k end
    redis.call('DEL', unpack(gone))
  end
  if own ~= 'r' then redis.call('PUBLISH', ns .. 'wake:' .. q, m) end
end
local function micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function mint(key, at)
  local now = at or micros()
  local last = tonumber(redis.call('SET', key, string.format('%.0f', now), 'GET') or '0')
  if now > last then return now end
  redis.call('SET', key, string.format('%.0f', last + 1))
  return last + 1
end
-- A group changed: its next version (minted from the counter every group
-- shares, so above every version before a loss of the data) and its
-- publication; an empty group's hashes go.
local function regroup(name)
  local gm, go = ns .. 'g:' .. name, ns .. 'go:' .. name
  local v = string.format('%.0f', mint(ns .. 'gv'))
  if redis.call('HLEN', go) == 0 then redis.call('DEL', gm, go) else redis.call('HSET', gm, '/v', v) end
  redis.call('PUBLISH', ns .. 'wake:' .. name, v)
end
-- Remove up to `budget` entries of the session `id` (its index `h:<id>`),
-- each only while it is still that session's, its going published as a
-- release publishes it; the index goes once empty. → the budget left.
local function forget(id, budget)
  local h = ns .. 'h:' .. id
  local e = redis.call('HGETALL', h)
  for i = 1, #e, 2 do
    if budget <= 0 then return 0 end
    local g, gid = string.match(e[i], '^g\n(.-)\n(.*)$')
    if g then
      if redis.call('HGET', ns .. 'go:' .. g, gid) == id then
        redis.call('HDEL', ns .. 'g:' .. g, gid)
        redis.call('HDEL', ns .. 'go:' .. g, gid)
        regroup(g)
      end
      redis.call('HDEL', h, e[i])
    else
      local q, k = entry_of(e[i + 1])
      if q then drop(q, k, e[i]) else redis.call('HDEL', h, e[i]) end
    end
    budget = budget - 1
  end
  redis.call('DEL', h)
  return budget
end
-- The sessions' deadlines (`deadlines`, a sorted set: id → when its key
-- expires, ms of the server's clock): forget up to 16 sessions whose key
-- is gone, at most 512 of their entries; a session whose key still lives
-- gets its deadline again (its key's; a minute when someone took its TTL).
local function sweep(now)
  local dl, budget = ns .. 'deadlines', 512
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', dl, '-inf', now, 'LIMIT', 0, 16)) do
    local left = redis.call('PTTL', ns .. 's:' .. id)
    if left >= 0 then redis.call('ZADD', dl, string.format('%.0f', now + left), id)
    elseif left == -1 then redis.call('ZADD', dl, string.format('%.0f', now + 60000), id)
    else
      budget = forget(id, budget)
      if budget <= 0 then return end
      redis.call('ZREM', dl, id)
    end
  end
end
-- Our session `id` lives until `now` + `ttl` ms: its deadline, and a sweep.
local function live_until(id, now, ttl)
  redis.call('ZADD', ns .. 'deadlines', string.format('%.0f', now + tonumber(ttl)), id)
  sweep(now)
end
"#
        )
    };
}

/// What every script shares, for scripts written in other modules (the
/// barriers').
pub(crate) const COMMON: &str = common!();

macro_rules! script {
    ($name:ident, $flags:literal, $($part:expr),+) => {
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(concat!("#!lua", $flags, "\n", $($part),+)));
    };
}

pub(crate) use {common, named};

// ARGV: ns, token, ttl ms → the new session's id. The first PUBLISH
// (no one listens) proves that an ACL lets us use our channels before
// anything is written: the other scripts publish after their writes.
script!(
    GRANT,
    "",
    common!(),
    r#"
redis.call('PUBLISH', ns .. 'granted', '')
local at = micros()
local id = mint(ns .. 'sessions', at)
local sid = string.format('%.0f', id)
redis.call('SET', ns .. 's:' .. sid, ARGV[2], 'PX', ARGV[3])
live_until(sid, math.floor(at / 1000), ARGV[3])
return id
"#
);

// ARGV: ns, id, token, ttl ms → 1 renewed, 0 gone. Never resurrects: an
// expired session key is not set again. The same few commands whatever
// the number of entries (a hold is live while its member's session key
// exists, so hold keys are never extended): the session key's `PX`, its
// deadline, and the sweep of expired sessions.
script!(
    RENEW,
    " flags=allow-oom",
    common!(),
    r#"
local s = ns .. 's:' .. ARGV[2]
if redis.call('GET', s) ~= ARGV[3] then return 0 end
redis.call('PEXPIRE', s, ARGV[4])
live_until(ARGV[2], math.floor(micros() / 1000), ARGV[4])
return 1
"#
);

// ARGV: ns, id → every entry of the session removed (and published), the
// session gone.
script!(
    REVOKE,
    " flags=allow-oom",
    common!(),
    r#"
local n = redis.call('HLEN', ns .. 'h:' .. ARGV[2])
forget(ARGV[2], math.huge)
redis.call('DEL', ns .. 's:' .. ARGV[2])
redis.call('ZREM', ns .. 'deadlines', ARGV[2])
return n
"#
);

// ARGV: ns, id, member… → how many of the members were removed, as a
// release removes them: each one still an entry of the session `id` (its
// index `h:<id>`) that holds a place in a lock's queue (it has a hold key:
// a mutex's, an election's, a permit's, a read-write lock's member; not a
// barrier's, nor a group member). The client sends the entries of its
// live session that no guard of it owns (`session.rs`, `forget_unknown`).
script!(
    FORGET,
    " flags=allow-oom",
    common!(),
    r#"
local h = ns .. 'h:' .. ARGV[2]
local n = 0
for i = 3, #ARGV do
  local q, k = entry_of(redis.call('HGET', h, ARGV[i]))
  -- A barrier's member keeps no hold key (''), a group member's field
  -- starts `g\n`: neither is a lock's entry.
  if q and k ~= '' and string.sub(ARGV[i], 1, 2) ~= 'g\n' then
    drop(q, k, ARGV[i])
    n = n + 1
  end
end
return n
"#
);

// ARGV: ns, hold key, member, op (set | del | proclaim), key, value,
// queue → 1 written, 0 refused (the hold key is not ours: nothing
// written).
script!(
    FENCED,
    "",
    common!(),
    r#"
if named(redis.call('GET', ARGV[2])) ~= ARGV[3] or redis.call('EXISTS', sess(ARGV[3])) == 0 then
  return 0
end
if ARGV[4] == 'set' then redis.call('SET', ARGV[5], ARGV[6])
elseif ARGV[4] == 'del' then redis.call('DEL', ARGV[5])
else
  redis.call('HSET', ns .. 'v:' .. ARGV[7], ARGV[3], ARGV[6])
  redis.call('PUBLISH', ns .. 'wake:' .. ARGV[7], ARGV[3])
end
return 1
"#
);

// ARGV: ns, size key, size, lock queue key, role key, the permits'
// queue, the prefix of its permit keys → {0} stored; {1, the stored
// size}; {-1} the name holds a lock or election, {-2} a read-write lock,
// {-3} the permits' queue (`<sem>/leases`) has a live member of another
// recipe (its hold key no permit's: a lock's, a read-write lock's, a
// barrier's none), whose entries would count as permits (checked as the
// size is first stored: later, a lock, an election or a read-write lock
// there is refused by the size key; a barrier is not, and the permits'
// enter then refuses the name).
script!(
    ENSURE_SIZE,
    "",
    common!(),
    r#"
if redis.call('EXISTS', ARGV[5]) == 1 then return {-2} end
if redis.call('EXISTS', ARGV[4]) == 1 then return {-1} end
local stored = redis.call('GET', ARGV[2])
if stored then return {1, stored} end
for _, m in ipairs(redis.call('ZRANGE', ns .. 'q:' .. ARGV[6], 0, -1)) do
  local _, k = index_entry(m)
  if k and k ~= ARGV[7] .. m and redis.call('EXISTS', sess(m)) == 1 then return {-3} end
end
redis.call('SET', ARGV[2], ARGV[3])
return {0}
"#
);

/// A caller's script run only while `hold` holds `member`: the two are
/// the last key and argument, taken off before the caller's `body` runs.
pub(crate) fn fenced_body(body: &str) -> Script {
    let named = named!();
    Script::new(&format!(
        "#!lua\nlocal hk, m = KEYS[#KEYS], ARGV[#ARGV]\n\
         local s = '{NS}s:' .. (string.match(m, '^(%d+)-') or '0')\n{named}\
         if named(redis.call('GET', hk)) ~= m or redis.call('EXISTS', s) == 0 then \
         return redis.error_reply('FENCED the lock is not held by this guard') end\n\
         KEYS[#KEYS] = nil\nARGV[#ARGV] = nil\nreturn (function()\n{body}\nend)()\n"
    ))
}
