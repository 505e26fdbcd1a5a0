//! The Lua scripts: every verb that touches more than one key is one
//! script, so it is atomic and one round trip (`EVALSHA`, loaded again on
//! `NOSCRIPT` by the `redis` crate).
//!
//! Keys, all below one hash-tagged prefix `{recipes}:` (`ns`), so that a
//! cluster would keep them in one slot:
//!
//! | key | what |
//! |---|---|
//! | `ns sessions` | the last session id (minted as a fence is) |
//! | `ns s:<id>` | a session: a random token, `PX` the TTL |
//! | `ns h:<id>` | the session's entries: member → `<queue>\n<hold key>` |
//! | `ns q:<queue>` | the queue, a sorted set: member → its place |
//! | `ns n:<queue>` | the queue's place counter (gone with the queue) |
//! | `ns v:<queue>` | the members' values (a candidate's) |
//! | `ns r:<name>` | a read-write lock's roles: member → `read` \| `write` |
//! | `ns lock:<name>` | the lock: the holder's member, `PX` its session's |
//! | `ns rw:<name>:<member>` | a held read or write side, as the lock |
//! | `ns permit:<sem>/leases:<member>` | a held permit, as the lock |
//! | `ns fence:<queue>` | the queue's last fence, never deleted |
//! | `ns size:<sem>` | a semaphore's size |
//!
//! A member is `<session id>-<uuid>`: made by the client before it is
//! sent, and naming its session. An entry is live while its session key
//! exists or it holds; dead ones are swept by the next listing. Going
//! entries are published on `ns gone:<member>` (the waiter behind a lock
//! entry listens there) and `ns wake:<queue>` (a permit waiter, an
//! observer).
//!
//! A read-write lock is the mutex's queue `ns q:<name>` with each
//! member's role beside it (`ns r:<name>`, which exists while it has
//! members): a name's queue is one recipe's, and each side's `ENTER`
//! refuses a name whose queue has live members of the other. Several
//! readers hold at once, so each holder has its own hold key, `PX` its
//! session's and renewed with it, as a permit's. `CONFIRM` decides the
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
//! since the Unix epoch (exact in Lua's doubles until the year 2255;
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

/// What every script shares: removing an entry and saying so.
macro_rules! common {
    () => {
        r#"
local ns = ARGV[1]
local function sid_of(m) return string.match(m, '^(%d+)-') or '0' end
local function sess(m) return ns .. 's:' .. sid_of(m) end
local function drop(q, k, m)
  local qk = ns .. 'q:' .. q
  redis.call('ZREM', qk, m)
  redis.call('HDEL', ns .. 'v:' .. q, m)
  redis.call('HDEL', ns .. 'r:' .. q, m)
  redis.call('HDEL', ns .. 'h:' .. sid_of(m), m)
  if redis.call('GET', k) == m then redis.call('DEL', k) end
  redis.call('PUBLISH', ns .. 'gone:' .. m, q)
  redis.call('PUBLISH', ns .. 'wake:' .. q, m)
  if redis.call('ZCARD', qk) == 0 then redis.call('DEL', ns .. 'n:' .. q, ns .. 'v:' .. q) end
end
local function mint(key)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if now > tonumber(redis.call('GET', key) or '0') then
    redis.call('SET', key, string.format('%.0f', now))
    return now
  end
  return redis.call('INCR', key)
end
"#
    };
}

/// What every script shares, for scripts written in other modules (the
/// barriers').
pub(crate) const COMMON: &str = common!();

/// What the queue scripts share: ARGV 2..5 are the queue, the hold key
/// (a lock's key, or the prefix of permit keys), the mode and our member.
macro_rules! queue {
    () => {
        r#"
local q, hk, mode, member = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local qk = ns .. 'q:' .. q
local rk = ns .. 'r:' .. q
local function holdkey(m) if mode == 'lock' then return hk end return hk .. m end
local function role(m) return redis.call('HGET', rk, m) end
local function alive(m)
  return redis.call('EXISTS', sess(m)) == 1 or redis.call('GET', holdkey(m)) == m
end
local function upto(ours)
  local out = {}
  for _, m in ipairs(redis.call('ZRANGE', qk, 0, -1)) do
    if alive(m) then out[#out + 1] = m else drop(q, holdkey(m), m) end
    if m == ours then break end
  end
  return out
end
local function shown(ms)
  if mode ~= 'rw' then return ms end
  local out = {}
  for i, m in ipairs(ms) do out[i] = (role(m) or 'write') .. ' ' .. m end
  return out
end
local function other(m)
  if redis.call('EXISTS', sess(m)) == 0 then return false end
  if mode == 'rw' then return not role(m) end
  return role(m) ~= false
end
"#
    };
}

macro_rules! script {
    ($name:ident, $flags:literal, $($part:expr),+) => {
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(concat!("#!lua", $flags, "\n", $($part),+)));
    };
}

// ARGV: ns, token, ttl ms → the new session's id. The first PUBLISH
// (no one listens) proves that an ACL lets us use our channels before
// anything is written: the other scripts publish after their writes.
script!(
    GRANT,
    "",
    common!(),
    r#"
redis.call('PUBLISH', ns .. 'granted', '')
local id = mint(ns .. 'sessions')
redis.call('SET', ns .. 's:' .. string.format('%.0f', id), ARGV[2], 'PX', ARGV[3])
return id
"#
);

// ARGV: ns, id, token, ttl ms → 1 renewed, 0 gone. Never resurrects: an
// expired session key is not set again, and a hold key is extended only
// while it holds our member.
script!(
    RENEW,
    " flags=allow-oom",
    common!(),
    r#"
local s, h = ns .. 's:' .. ARGV[2], ns .. 'h:' .. ARGV[2]
if redis.call('GET', s) ~= ARGV[3] then return 0 end
redis.call('PEXPIRE', s, ARGV[4])
local e = redis.call('HGETALL', h)
for i = 1, #e, 2 do
  local k = string.match(e[i + 1], '\n(.*)$')
  if k and redis.call('GET', k) == e[i] then redis.call('PEXPIRE', k, ARGV[4]) end
end
if #e > 0 then redis.call('PEXPIRE', h, ARGV[4]) end
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
local h = ns .. 'h:' .. ARGV[2]
local e = redis.call('HGETALL', h)
for i = 1, #e, 2 do
  local q, k = string.match(e[i + 1], '^(.-)\n(.*)$')
  if q then drop(q, k, e[i]) end
end
redis.call('DEL', h, ns .. 's:' .. ARGV[2])
return #e / 2
"#
);

// ARGV: ns, queue, hold, mode, member, token, value (a read-write lock's:
// the role), conflict key, inside key → {0, live members up to ours, as
// `shown`}; {-1} our session is gone; {-2} the conflict key exists (the
// name holds a semaphore); {-3} the inside key exists (the name is a
// semaphore's own queue); {-4} the queue has live members of the other
// recipe (a lock's or an election's for a read-write lock, and the
// reverse).
script!(
    ENTER,
    "",
    common!(),
    queue!(),
    r#"
if redis.call('GET', sess(member)) ~= ARGV[6] then return {-1} end
if ARGV[8] ~= '' and redis.call('EXISTS', ARGV[8]) == 1 then return {-2} end
if ARGV[9] ~= '' and redis.call('EXISTS', ARGV[9]) == 1 then return {-3} end
local others = {}
if mode == 'rw' then others = redis.call('ZRANGE', qk, 0, -1)
elseif mode == 'lock' then others = redis.call('HKEYS', rk) end
for _, m in ipairs(others) do if m ~= member and other(m) then return {-4} end end
if not redis.call('ZSCORE', qk, member) then
  redis.call('ZADD', qk, redis.call('INCR', ns .. 'n:' .. q), member)
  if mode == 'rw' then redis.call('HSET', rk, member, ARGV[7])
  else redis.call('HSET', ns .. 'v:' .. q, member, ARGV[7]) end
  local h = ns .. 'h:' .. sid_of(member)
  redis.call('HSET', h, member, q .. '\n' .. holdkey(member))
  redis.call('PEXPIRE', h, redis.call('PTTL', sess(member)))
  redis.call('PUBLISH', ns .. 'wake:' .. q, member)
end
return {0, shown(upto(member))}
"#
);

// ARGV: ns, queue, hold, mode, member → the live members up to ours
// (all of them if ours is gone) as `shown`, the dead swept.
script!(
    LIST,
    " flags=allow-oom",
    common!(),
    queue!(),
    "return shown(upto(member))\n"
);

// ARGV: ns, queue, hold, mode, member[, `reader`] → 1 while the member is
// queued and live (its session's key exists, or it holds); for a reader
// waiting on a writer, 0 once that writer was downgraded to `read` too.
script!(
    ALIVE,
    " flags=no-writes",
    common!(),
    queue!(),
    r#"
if not (redis.call('ZSCORE', qk, member) and alive(member)) then return 0 end
if ARGV[6] == 'reader' and role(member) == 'read' then return 0 end
return 1
"#
);

// ARGV: ns, queue, hold, mode, member, token, max, fence key → the fence
// (`SET hold member NX PX <session's PTTL>`, then `mint`, only on a new
// acquisition; a resent confirm of a holder gets the name's last fence);
// -1 our session or entry is gone; -2 not ours yet: more than `max` live
// members ahead, or for a read-write lock (`max` unused) a writer ahead
// of a reader, anyone ahead of a writer.
script!(
    CONFIRM,
    "",
    common!(),
    queue!(),
    r#"
local s = sess(member)
if redis.call('GET', s) ~= ARGV[6] then return -1 end
local live = upto(member)
if live[#live] ~= member then return -1 end
local k = holdkey(member)
local cur = redis.call('GET', k)
if cur == member then return tonumber(redis.call('GET', ARGV[8])) end
if cur then return -2 end
if mode == 'rw' then
  local reader = role(member) == 'read'
  for i = 1, #live - 1 do
    if not reader or role(live[i]) ~= 'read' then return -2 end
  end
elseif #live > tonumber(ARGV[7]) then return -2 end
redis.call('SET', k, member, 'NX', 'PX', redis.call('PTTL', s))
return mint(ARGV[8])
"#
);

// ARGV: ns, queue, hold, mode, member → 1 it held, 0 it did not; either
// way it is gone and its going published.
script!(
    REMOVE,
    " flags=allow-oom",
    common!(),
    queue!(),
    r#"
local held = redis.call('GET', holdkey(member)) == member
drop(q, holdkey(member), member)
if held then return 1 end
return 0
"#
);

// ARGV: ns, queue, hold, mode (rw), member → 1 the holding writer is a
// reader now, in its place, and the readers waiting on it are woken; 0 it
// no longer holds (nothing changed). Only overwrites a value: allowed at
// `maxmemory`.
script!(
    DOWNGRADE,
    " flags=allow-oom",
    common!(),
    queue!(),
    r#"
if redis.call('GET', holdkey(member)) ~= member then return 0 end
if not redis.call('ZSCORE', qk, member) then return 0 end
redis.call('HSET', rk, member, 'read')
redis.call('PUBLISH', ns .. 'gone:' .. member, q)
redis.call('PUBLISH', ns .. 'wake:' .. q, member)
return 1
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
if redis.call('GET', ARGV[2]) ~= ARGV[3] then return 0 end
if ARGV[4] == 'set' then redis.call('SET', ARGV[5], ARGV[6])
elseif ARGV[4] == 'del' then redis.call('DEL', ARGV[5])
else
  redis.call('HSET', ns .. 'v:' .. ARGV[7], ARGV[3], ARGV[6])
  redis.call('PUBLISH', ns .. 'wake:' .. ARGV[7], ARGV[3])
end
return 1
"#
);

// ARGV: ns, queue, hold, mode → the live members, flat: member, place,
// value, role (a read-write lock member's, else empty), …
script!(
    CONTENDERS,
    " flags=no-writes",
    common!(),
    queue!(),
    r#"
local out = {}
local all = redis.call('ZRANGE', qk, 0, -1, 'WITHSCORES')
for i = 1, #all, 2 do
  if alive(all[i]) then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
    out[#out + 1] = redis.call('HGET', ns .. 'v:' .. q, all[i]) or ''
    out[#out + 1] = role(all[i]) or ''
  end
end
return out
"#
);

// ARGV: ns, size key, size, lock queue key, role key → 0 stored or
// equal; the stored size when it differs; -1 the name holds a lock or
// election, -2 a read-write lock.
script!(
    ENSURE_SIZE,
    "",
    common!(),
    r#"
if redis.call('EXISTS', ARGV[5]) == 1 then return {-2} end
if redis.call('EXISTS', ARGV[4]) == 1 then return {-1} end
local stored = redis.call('GET', ARGV[2])
if not stored then redis.call('SET', ARGV[2], ARGV[3]); return {0} end
return {1, stored}
"#
);

/// A caller's script run only while `hold` holds `member`: the two are
/// the last key and argument, taken off before the caller's `body` runs.
pub(crate) fn fenced_body(body: &str) -> Script {
    Script::new(&format!(
        "#!lua\nlocal hk, m = KEYS[#KEYS], ARGV[#ARGV]\n\
         if redis.call('GET', hk) ~= m then \
         return redis.error_reply('FENCED the lock is not held by this guard') end\n\
         KEYS[#KEYS] = nil\nARGV[#ARGV] = nil\nreturn (function()\n{body}\nend)()\n"
    ))
}
