//! The queue's Lua: entering, listing, confirming, leaving and
//! downgrading a queue's member, for the mutex, the semaphore, the
//! read-write lock and the election alike ([`crate::scripts`] says what
//! the keys are and what every script shares).
//!
//! These run on every acquisition and release, so they are one Redis
//! **function library** (Redis 7's `FUNCTION LOAD`), not scripts: a
//! script's chunk runs whole at each `EVALSHA`, defining every helper
//! again (~2 µs of the server's time a call, measured with
//! `redis-benchmark`: 3.8–5.5 µs against 1.6–2.3 for an empty script),
//! while a library defines them once, as it loads, and `FCALL` runs only
//! the called function. The library's name carries a hash of its code, so
//! clients of different versions each call their own; a server without
//! it (restarted without persistence, a new replica promoted before it
//! was replicated) gets it again on the first `Function not found`.

use std::sync::LazyLock;

use crate::scripts::common;

/// A function of the queue library: its name in the library, its flags
/// and its body, run with `ARGV` (the library's locals set from it first,
/// as [`PREFIX`] says).
pub(crate) struct Func {
    name: &'static str,
    flags: &'static str,
    body: &'static str,
}

/// The library as loaded: its code, and the name each of [`FUNCS`] is
/// registered under (function names are global to the server: the
/// library's name is their prefix), made once.
pub(crate) struct Library {
    pub(crate) code: String,
    names: Vec<String>,
}

impl Library {
    /// The name `f` is registered under.
    pub(crate) fn function(&self, f: &Func) -> &str {
        let at = FUNCS.iter().position(|g| std::ptr::eq(*g, f));
        &self.names[at.expect("every queue function is in FUNCS")]
    }
}

/// What every queue function shares: `ARGV` 1..5 are the namespace, the
/// queue, the hold key (a lock's key, or the prefix of permit keys), the
/// mode and our member; `setup` sets them (and empties the memos) as each
/// call starts.
const PREFIX: &str = r#"
local ns, q, hk, mode, member, qk, rk, roles, lives
local function setup(argv)
  ns, q, hk, mode, member = argv[1], argv[2], argv[3], argv[4], argv[5]
  qk = ns .. 'q:' .. q
  rk = ns .. 'r:' .. q
  -- A member's role and liveness, read once a call (ours gets its role
  -- before it is read; a dropped member is not read again).
  roles, lives = {}, {}
end
"#;

/// The helpers of the queue functions.
const HELPERS: &str = r#"
local function holdkey(m) if mode == 'lock' then return hk end return hk .. m end
local function role(m) if roles[m] == nil then roles[m] = redis.call('HGET', rk, m) end return roles[m] end
local function alive(m) if lives[m] == nil then lives[m] = redis.call('EXISTS', sess(m)) == 1 end return lives[m] end
-- A dead member's hold key, as its session's index names it: the member
-- may be of another recipe than the caller's (a name whose members all
-- died may be taken by another recipe, whose listing sweeps them), and
-- a key read under the caller's layout would be left for good. The
-- caller's layout's where the index has none.
local function keyof(m)
  local _, k = index_entry(m)
  return k or holdkey(m)
end
local function upto(ours)
  local out = {}
  for _, m in ipairs(redis.call('ZRANGE', qk, 0, -1)) do
    if alive(m) then out[#out + 1] = m else drop(q, keyof(m), m) end
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
-- The recipe a live member `m` of another recipe belongs to, as a
-- refusal names it; false for ours (or a dead member).
local function other(m)
  if not alive(m) then return false end
  local r = role(m)
  if mode == 'rw' and (r == 'read' or r == 'write') then return false end
  if mode ~= 'rw' and not r then return false end
  if r == 'barrier' then return 'a barrier' end
  if r == 'double' then return 'a double barrier' end
  if r then return 'a read-write lock' end
  return 'a lock or election'
end
-- Set ours' hold key `k` and mint the fence: a lock's names our member
-- (the name's last fence is ours while it holds: no one else mints); a
-- permit's or a read-write lock member's, `<member> <fence>`, keeps the
-- fence minted for it, which holders sharing the name's counter cannot
-- change, for a resent enter or confirm to answer. `nx`: only if `k` is
-- free. → the fence; or false and the value `k` holds (`nx`, `k` set).
-- The counter moves after the write (from the clock read before it), so
-- a refused `SET` mints nothing.
local function hold(k, fkey, nx)
  local function keeping(f) return member .. ' ' .. string.format('%.0f', f) end
  local v, now = member, nil
  if mode ~= 'lock' then
    now = micros()
    v = keeping(now)
  end
  local found
  if nx then found = redis.call('SET', k, v, 'NX', 'GET') else redis.call('SET', k, v) end
  if found then return false, found end
  local fence = mint(fkey, now)
  if now and fence ~= now then redis.call('SET', k, keeping(fence)) end
  return fence
end
-- Ours holds if the rule says so over `live` (the live members up to
-- ours): set the hold key and mint the fence. `fresh`: ours holds by
-- the rule (the queue was empty, or held readers only and ours is a
-- reader), so its hold key is free unless someone tampered with the
-- queue or this is a resent enter (then the checks below run). A hold of a
-- member whose session expired is free. → the fence (a resent call's:
-- the one minted for it); -1 ours is gone; -2 not ours yet.
local function take(live, max, fkey, fresh)
  if live[#live] ~= member then return -1 end
  local k = holdkey(member)
  local fence, cur
  if fresh then
    fence, cur = hold(k, fkey, true)
    if fence then return fence end
  else cur = redis.call('GET', k) end
  -- A resend: a lock's fence is the name's last (no one else mints while
  -- it holds), a side's or a permit's the one its key keeps.
  local m, f = named(cur)
  if m == member then return tonumber(f or redis.call('GET', fkey)) end
  if m and alive(m) then return -2 end
  if mode == 'rw' then
    local reader = role(member) == 'read'
    for i = 1, #live - 1 do
      if not reader or role(live[i]) ~= 'read' then return -2 end
    end
  elseif #live > tonumber(max) then return -2 end
  return (hold(k, fkey, false))
end
"#;

// ARGV: ns, queue, hold, mode, member, token, value (a read-write lock's:
// the role), conflict key, inside key, max (as `CONFIRM`'s; empty: do
// not take), fence key → {0, live members up to ours, as
// `shown`[, the fence when ours holds: taken in the same script, as
// `CONFIRM` takes it]}; {-1} our session is gone; {-2} the conflict key
// exists (the name holds a semaphore); {-3} the inside key exists (the
// name is a semaphore's own queue); {-4, {what}} the queue has live
// members of another recipe, `what` (a lock's or an election's, a
// barrier's, a double barrier's for a read-write lock; a read-write
// lock's or a barrier's for a lock or a permit), or the name holds a plain
// barrier's or a shared counter's key. Into an empty queue (the
// uncontended path) it reads nothing of the queue but the one probe of the
// name's keys; a reader into a queue of readers only
// reads their roles, not each member (their liveness does not matter: no
// writer is among them), and is shown alone.
pub(crate) static ENTER: Func = Func {
    name: "enter",
    flags: "",
    body: r#"
if redis.call('GET', sess(member)) ~= ARGV[6] then return {-1} end
-- Every member of the read-write lock's queue a reader, live or dead
-- (each has a role, and it is `read`): no member of another recipe, no
-- writer; a reader entering it holds at once.
local readers = false
local probe = {}
if ARGV[8] ~= '' then probe[#probe + 1] = ARGV[8] end
if ARGV[9] ~= '' then probe[#probe + 1] = ARGV[9] end
-- A lock's or a permit's queue has no roles of its own: the roles' key
-- there is another recipe's members (a barrier's, a double barrier's, a
-- read-write lock's), which the rule would count as ours.
if mode == 'lock' or mode == 'permit' then probe[#probe + 1] = rk end
-- The keys of the recipes whose names hold no queue of their own: a
-- plain barrier's, a shared counter's (same probe, no command more).
local marks = {}
if mode ~= 'permit' then
  marks = {{ns .. 'barrier:' .. q, 'a barrier'}, {ns .. 'count:' .. q, 'a shared counter'}}
  for _, m in ipairs(marks) do probe[#probe + 1] = m[1] end
end
-- The queue joins a probe made anyway: nothing found is an empty queue
-- too, with no read of it (the uncontended path). What is found but the
-- queue is another recipe's key.
local found, last = 0, nil
if #probe > 0 then
  probe[#probe + 1] = qk
  found = redis.call('EXISTS', unpack(probe))
  if found == 0 then last = {} end
end
if not last then last = redis.call('ZRANGE', qk, -1, -1, 'WITHSCORES') end
local foreign = found
if last[1] and #probe > 0 then foreign = found - 1 end
if foreign > 0 or (mode == 'rw' and last[1]) then
  if foreign > 0 and ARGV[8] ~= '' and redis.call('EXISTS', ARGV[8]) == 1 then return {-2} end
  if foreign > 0 and ARGV[9] ~= '' and redis.call('EXISTS', ARGV[9]) == 1 then return {-3} end
  for _, m in ipairs(marks) do
    if foreign > 0 and redis.call('EXISTS', m[1]) == 1 then return {-4, {m[2]}} end
  end
  if mode == 'rw' then
    local roles = redis.call('HVALS', rk)
    readers = true
    for _, r in ipairs(roles) do if r ~= 'read' then readers = false break end end
    if readers then readers = #roles == redis.call('ZCARD', qk) end
  end
  if not readers then
    local others = {}
    if mode == 'rw' then others = redis.call('ZRANGE', qk, 0, -1)
    elseif mode == 'lock' or mode == 'permit' then others = redis.call('HKEYS', rk) end
    for _, m in ipairs(others) do
      local theirs = m ~= member and other(m)
      if theirs then return {-4, {theirs}} end
    end
  end
end
local fresh = last[1] == nil
local place = 1
if not fresh then place = tonumber(last[2]) + 1 end
-- NX: a resent enter of a member already queued changes nothing.
if last[1] ~= member and redis.call('ZADD', qk, 'NX', place, member) == 1 then
  if mode == 'rw' then
    redis.call('HSET', rk, member, ARGV[7])
    roles[member] = ARGV[7]
  elseif ARGV[7] ~= '' then redis.call('HSET', ns .. 'v:' .. q, member, ARGV[7]) end
  local h = ns .. 'h:' .. sid_of(member)
  redis.call('HSET', h, member, q .. '\n' .. holdkey(member))
  -- An election's observers listen here for a new leader: published
  -- for a candidate (it has a value). A mutex's enter, a permit's or a
  -- read-write lock member's lets no waiter in (they wait for a going),
  -- and shows at an observer's next poll.
  if mode == 'lock' and ARGV[7] ~= '' then redis.call('PUBLISH', ns .. 'wake:' .. q, member) end
end
-- Ours holds by the rule without a listing: alone in the queue, or a
-- reader among readers only.
local holds = fresh or (readers and ARGV[7] == 'read')
local live
if holds then live = {member} else live = upto(member) end
if ARGV[10] ~= '' then
  local fence = take(live, ARGV[10], ARGV[11], holds)
  if fence > 0 then return {0, shown(live), fence} end
end
return {0, shown(live)}
"#,
};

// ARGV: ns, queue, hold, mode, member → the live members up to ours
// (all of them if ours is gone) as `shown`, the dead swept.
pub(crate) static LIST: Func = Func {
    name: "list",
    flags: "allow-oom",
    body: "return shown(upto(member))\n",
};

// ARGV: ns, queue, hold, mode, member[, `reader`] → 1 while the member is
// queued and live (its session's key exists); for a reader
// waiting on a writer, 0 once that writer was downgraded to `read` too.
pub(crate) static ALIVE: Func = Func {
    name: "alive",
    flags: "no-writes",
    body: r#"
if not (redis.call('ZSCORE', qk, member) and alive(member)) then return 0 end
if ARGV[6] == 'reader' and role(member) == 'read' then return 0 end
return 1
"#,
};

// ARGV: ns, queue, hold, mode, member, token, max, fence key → the fence
// (`SET hold member`: free, or a hold of an expired session; then `mint`, only on a new
// acquisition; a resent confirm of a holder gets the fence minted for it:
// a lock's, the name's last; a permit's or a read-write lock member's,
// the one its hold key keeps);
// -1 our session or entry is gone; -2 not ours yet: more than `max` live
// members ahead, or for a read-write lock (`max` unused) a writer ahead
// of a reader, anyone ahead of a writer.
pub(crate) static CONFIRM: Func = Func {
    name: "confirm",
    flags: "",
    body: r#"
if redis.call('GET', sess(member)) ~= ARGV[6] then return -1 end
return take(upto(member), ARGV[7], ARGV[8], false)
"#,
};

// ARGV: ns, queue, hold, mode, member → 1 it held, 0 it did not; either
// way it is gone and its going published.
pub(crate) static REMOVE: Func = Func {
    name: "remove",
    flags: "allow-oom",
    body: r#"
-- A lock's one hold key is whoever's holds (read, then deleted by
-- `drop` if ours); a permit's or a reader's or writer's is the member's
-- own (only its `take` writes it): deleted here, its count the answer.
local k, lock = holdkey(member), mode == 'lock'
local held
if lock then held = redis.call('GET', k) == member
else held = redis.call('DEL', k) == 1 end
drop(q, k, member, lock and held, mode == 'rw' and 'r' or 'v')
if held then return 1 end
return 0
"#,
};

// ARGV: ns, queue, hold, mode (rw), member → 1 the holding writer is a
// reader now, in its place, and the readers waiting on it are woken (on
// its `gone:`, where they listen); 0 it
// no longer holds (nothing changed). Only overwrites a value: allowed at
// `maxmemory`.
pub(crate) static DOWNGRADE: Func = Func {
    name: "downgrade",
    flags: "allow-oom",
    body: r#"
if named(redis.call('GET', holdkey(member))) ~= member or not alive(member) then return 0 end
if not redis.call('ZSCORE', qk, member) then return 0 end
redis.call('HSET', rk, member, 'read')
redis.call('PUBLISH', ns .. 'gone:' .. member, q)
return 1
"#,
};

// ARGV: ns, queue, hold, mode → the live members, flat: member, place,
// value, role (a read-write lock member's, else empty), …
pub(crate) static CONTENDERS: Func = Func {
    name: "contenders",
    flags: "no-writes",
    body: r#"
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
"#,
};

/// Every function of the library.
const FUNCS: [&Func; 7] = [
    &ENTER,
    &LIST,
    &ALIVE,
    &CONFIRM,
    &REMOVE,
    &DOWNGRADE,
    &CONTENDERS,
];

/// The queue library: [`common`]'s helpers (the namespace a local of the
/// library, set by each call), [`PREFIX`], [`HELPERS`], and each function
/// registered with its flags; named `recipes_q` and a hash of the rest.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let common = common!();
    let shared = common.replacen("local ns = ARGV[1]\n", "", 1);
    assert_ne!(
        shared, common,
        "the common helpers read the namespace first"
    );
    let mut code = format!("{PREFIX}{shared}{HELPERS}");
    for f in FUNCS {
        let flags = match f.flags {
            "" => String::new(),
            flag => format!("'{flag}'"),
        };
        code.push_str(&format!(
            "redis.register_function{{function_name = LIB .. '_{}', flags = {{{flags}}}, \
             callback = function(KEYS, ARGV)\nsetup(ARGV)\n{}\nend}}\n",
            f.name, f.body
        ));
    }
    let name = format!("recipes_q{:016x}", fnv1a(code.as_bytes()));
    let code = format!("#!lua name={name}\nlocal LIB = '{name}'\n{code}");
    let names = FUNCS.iter().map(|f| format!("{name}_{}", f.name)).collect();
    Library { code, names }
});

/// FNV-1a, 64 bits: a stable name for one version of the library.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
