//! The barriers' scripts (their keys: see [`RedisWaits`](crate::RedisWaits)).
//! Each returns `{code, least, flag, members, what}`: `code` -1 when the
//! name holds another recipe (`what` says which), -2 when our session is
//! gone, else 0 or 1; `least` the least time to live, in ms, of the live
//! members' sessions (-1: none); `flag` the double barrier's flag (0:
//! none); `members` the live members.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::COMMON;

/// The name's keys, and `party(want)`: the live members of role `want`
/// (`barrier`: a tied setter, `double`: a double barrier's member), the
/// least TTL of their sessions and each member's place (its score in the
/// queue, by the member's index), the dead swept (their going
/// published); or `nil` and what else holds the name.
const PARTY: &str = r#"
local name = ARGV[2]
local qk, rk = ns .. 'q:' .. name, ns .. 'r:' .. name
local bk, fk, nk = ns .. 'barrier:' .. name, ns .. 'ready:' .. name, ns .. 'n:' .. name
local function reply(code, least, members, what)
  return {code, least, tonumber(redis.call('GET', fk) or '0'), members, what}
end
local function party(want)
  if redis.call('EXISTS', ns .. 'size:' .. name) == 1 then return nil, 'a semaphore' end
  if redis.call('EXISTS', ns .. 'count:' .. name) == 1 then return nil, 'a shared counter' end
  if want == 'double' and redis.call('EXISTS', bk) == 1 then return nil, 'a barrier' end
  if want == 'barrier' and redis.call('EXISTS', fk) == 1 then return nil, 'a double barrier' end
  local out, least, at = {}, -1, {}
  local placed = redis.call('ZRANGE', qk, 0, -1, 'WITHSCORES')
  for i = 1, #placed, 2 do
    local m = placed[i]
    local r = redis.call('HGET', rk, m)
    local t = redis.call('PTTL', sess(m))
    if r == want then
      if t == -2 then drop(name, '', m)
      else
        out[#out + 1] = m
        at[#out] = placed[i + 1]
        if least < 0 or t < least then least = t end
      end
    elseif t ~= -2 or redis.call('GET', ns .. 'lock:' .. name) == m then
      if r == 'double' then return nil, 'a double barrier' end
      if r == 'barrier' then return nil, 'a barrier' end
      if r then return nil, 'a read-write lock' end
      return nil, 'a lock or election'
    end
  end
  return out, least, at
end
local function join(m, role, place)
  redis.call('ZADD', qk, place, m)
  redis.call('HSET', rk, m, role)
  redis.call('HSET', ns .. 'h:' .. sid_of(m), m, name .. '\n')
  redis.call('PUBLISH', ns .. 'wake:' .. name, m)
end
"#;

macro_rules! waits_script {
    ($name:ident, $body:literal) => {
        waits_script!($name, "", $body);
    };
    // `flags`: the shebang's, as " flags=allow-oom" for what only reads or
    // removes (a read drops dead members): run at `maxmemory` too, as
    // releases are.
    ($name:ident, $flags:literal, $body:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(&format!("#!lua{}\n{COMMON}\n{PARTY}\n{}", $flags, $body))
        });
    };
}

// ARGV: ns, name → up (1) or down (0).
waits_script!(
    IS_SET,
    " flags=allow-oom",
    r#"
local ms, least = party('barrier')
if not ms then return reply(-1, -1, {}, least) end
if redis.call('EXISTS', bk) == 1 or #ms > 0 then return reply(1, least, ms, '') end
return reply(0, least, ms, '')
"#
);

// ARGV: ns, name, tied (1 | 0), member, token → 1 set, 0 up already.
waits_script!(
    SET,
    r#"
local ms, least = party('barrier')
if not ms then return reply(-1, -1, {}, least) end
if redis.call('EXISTS', bk) == 1 or #ms > 0 then return reply(0, least, ms, '') end
if ARGV[3] ~= '1' then
  redis.call('SET', bk, '1')
  return reply(1, least, ms, '')
end
if redis.call('GET', sess(ARGV[4])) ~= ARGV[5] then return reply(-2, least, ms, '') end
join(ARGV[4], 'barrier', 0)
return reply(1, least, ms, '')
"#
);

// ARGV: ns, name → 0: down, every waiter told.
waits_script!(
    REMOVE,
    " flags=allow-oom",
    r#"
local ms, least = party('barrier')
if not ms then return reply(-1, -1, {}, least) end
redis.call('DEL', bk)
for _, m in ipairs(ms) do drop(name, '', m) end
redis.call('PUBLISH', ns .. 'wake:' .. name, '')
return reply(0, -1, {}, '')
"#
);

// ARGV: ns, name, member, token → 0 with our place as `least` (1 when
// just added). A place is above the flag's.
waits_script!(
    JOIN,
    r#"
local ms, least = party('double')
if not ms then return reply(-1, -1, {}, least) end
local m = ARGV[3]
local at = redis.call('ZSCORE', qk, m)
if at then return reply(0, tonumber(at), ms, '') end
if redis.call('GET', sess(m)) ~= ARGV[4] then return reply(-2, least, ms, '') end
local place = redis.call('INCR', nk)
local f = tonumber(redis.call('GET', fk) or '0')
if place <= f then
  place = f + 1
  redis.call('SET', nk, place)
end
join(m, 'double', place)
return reply(1, place, ms, '')
"#
);

// ARGV: ns, name → the flag and the live members, each followed by its
// place: {member, place, member, place, ...}.
waits_script!(
    READ,
    " flags=allow-oom",
    r#"
local ms, least, at = party('double')
if not ms then return reply(-1, -1, {}, least) end
local placed = {}
for i, m in ipairs(ms) do
  placed[#placed + 1] = m
  placed[#placed + 1] = at[i]
end
return reply(0, least, placed, '')
"#
);

// ARGV: ns, name, stale flag (0: none) → 1 set at the next place, 0 not
// (another set it since).
waits_script!(
    MARK,
    r#"
if tonumber(redis.call('GET', fk) or '0') ~= tonumber(ARGV[3]) then return reply(0, -1, {}, '') end
redis.call('SET', fk, redis.call('INCR', nk))
redis.call('PUBLISH', ns .. 'wake:' .. name, '')
return reply(1, -1, {}, '')
"#
);

// ARGV: ns, name, flag → the flag cleared if it is still that one and
// nobody is in.
waits_script!(
    UNMARK,
    " flags=allow-oom",
    r#"
local ms, least = party('double')
if not ms then return reply(-1, -1, {}, least) end
if #ms == 0 and redis.call('ZCARD', qk) == 0 and redis.call('GET', fk) == ARGV[3] then
  redis.call('DEL', fk)
end
return reply(0, -1, {}, '')
"#
);

// ARGV: ns, name, member → our member gone, its going published.
waits_script!(
    LEAVE,
    " flags=allow-oom",
    r#"
drop(name, '', ARGV[3])
return reply(0, -1, {}, '')
"#
);
