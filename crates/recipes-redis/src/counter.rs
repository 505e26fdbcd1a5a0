//! The shared counter: the hash `{recipes}:count:<name>` with the fields
//! `value` (decimal text) and `version` (1 once written, one more for
//! every write; 0 while the hash does not exist). A write is one script
//! comparing the version (the value is never computed in Lua, whose
//! numbers lose 64-bit precision). A name that holds a lock's, election's
//! or semaphore's keys is refused. Every write publishes on the name's
//! wake channel (`{recipes}:wake:<name>`, as barriers and groups do); a
//! wait arms its ear before it reads (on the object's one subscribed
//! connection, kept while it waits: `ears.rs`), and reads again only
//! when a message comes, that connection drops, or after 10 s without
//! either (a safety net: nothing of a counter expires unheard); every
//! 500 ms when it could not subscribe.

use std::sync::LazyLock;
use std::time::Duration;

use recipes_core::store::engine::Nudge;
use recipes_core::store::{CounterBackend, SetIf};
use recipes_core::{CounterKind, Error, Result, Versioned};
use redis::Script;

use crate::barrier::{Changes, Epoch, RedisWaits};
use crate::client::RedisClient;
use crate::contend::POLL;
use crate::names::{other_layout, validate_name, NS};
use crate::rpc::unexpected;

/// How long a subscribed waiter goes without a read when nothing is
/// published: a safety net only (a lost message with the connection up).
const QUIET: Duration = Duration::from_secs(10);

/// Which other recipe holds the name (`''`: none); shared by both scripts.
const OTHER: &str = r#"
local ns, name = ARGV[1], ARGV[2]
local key = ns .. 'count:' .. name
local function other()
  if redis.call('EXISTS', ns .. 'size:' .. name) == 1 then return 'a semaphore' end
  if redis.call('EXISTS', ns .. 'q:' .. name) == 1 or redis.call('EXISTS', ns .. 'lock:' .. name) == 1 then
    return 'a lock or election'
  end
  return ''
end
"#;

// ARGV: ns, name → {value or '', version, other recipe or ''}.
static GET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua flags=no-writes\n{OTHER}\nlocal v = redis.call('HMGET', key, 'value', 'version')\n\
         return {{v[1] or '', v[2] or '0', other()}}\n"
    ))
});

// ARGV: ns, name, version, value, 'set' | 'del' → {'ok'},
// {'conflict', value or '', version} or {'other:<recipe>'}. A write publishes on the name's wake channel.
static CAS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua\n{OTHER}\nlocal o = other()\nif o ~= '' then return {{'other:' .. o}} end\n\
         local v = redis.call('HMGET', key, 'value', 'version')\n\
         local now = tonumber(v[2] or '0')\n\
         if now ~= tonumber(ARGV[3]) then return {{'conflict', v[1] or '', v[2] or '0'}} end\n\
         if ARGV[5] == 'del' then redis.call('DEL', key)\n\
         else redis.call('HSET', key, 'value', ARGV[4], 'version', string.format('%d', now + 1)) end\n\
         redis.call('PUBLISH', ns .. 'wake:' .. name, '')\n\
         return {{'ok'}}\n"
    ))
});

/// A counter backend on Redis; see the module.
#[derive(Debug, Clone)]
pub struct RedisCounter {
    client: RedisClient,
    name: String,
    kind: CounterKind,
    waits: RedisWaits,
}

impl RedisCounter {
    pub(crate) fn new(client: &RedisClient, name: &str, kind: CounterKind) -> Result<RedisCounter> {
        validate_name("counter", name)?;
        Ok(RedisCounter {
            waits: RedisWaits::new(client, name, 0),
            client: client.clone(),
            name: name.to_owned(),
            kind,
        })
    }

    async fn read(&self) -> Result<Versioned> {
        let redis = self.client.redis()?;
        let args = [NS.to_owned(), self.name.clone()];
        let what = "read the counter";
        let timeout = self.client.rpc_timeout();
        let (value, version, other): (String, String, String) =
            redis.idempotent(what, timeout, &GET, &args).await?;
        if !other.is_empty() {
            return Err(self.refused(&other));
        }
        self.decode(&value, &version)
    }

    /// The counter from a script's `value` (`''` while absent) and
    /// `version` fields.
    fn decode(&self, value: &str, version: &str) -> Result<Versioned> {
        if value.is_empty() {
            return Ok(Versioned {
                value: 0,
                version: 0,
            });
        }
        let bad = || {
            Error::invalid(format!(
                "the Redis counter {} holds {value:?} at version {version:?}, not a {} \
                 counter: open it as a 64-bit counter (counter64), or choose another name",
                recipes_core::store::quote(&self.name),
                self.kind.describe()
            ))
        };
        let value = value.parse::<i64>().ok().filter(|v| self.kind.fits(*v));
        let version = version.parse::<u64>().ok();
        match (value, version) {
            (Some(value), Some(version)) => Ok(Versioned { value, version }),
            _ => Err(bad()),
        }
    }

    fn refused(&self, theirs: &str) -> Error {
        other_layout(&self.name, "a counter", theirs)
    }

    fn cas(&self, what: &'static str, version: u64, value: i64, op: &'static str) -> Result<SetIf> {
        let me = self.clone();
        let timeout = self.client.rpc_timeout();
        self.client.call(what, async move {
            let redis = me.client.redis()?;
            let args = [
                NS.to_owned(),
                me.name.clone(),
                version.to_string(),
                value.to_string(),
                op.to_owned(),
            ];
            // Sent once: a resent write would find its own version and say
            // "conflict" although it landed, and add would add twice.
            let reply: Vec<String> = redis.once(what, timeout, &CAS, &args).await?;
            match reply.as_slice() {
                [ok] if ok == "ok" => Ok(SetIf::Set),
                [conflict, value, version] if conflict == "conflict" => me
                    .decode(value, version)
                    .map(|now| SetIf::Conflict(Some(now))),
                [other] => Err(me.refused(other.strip_prefix("other:").unwrap_or(other))),
                _ => Err(unexpected(what, &reply)),
            }
        })
    }
}

impl CounterBackend for RedisCounter {
    type Waits = RedisWaits;

    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        let me = self.clone();
        self.client
            .call("read the counter", async move { me.read().await })
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        self.set_if_seen(version, value).map(|r| r == SetIf::Set)
    }

    fn set_if_seen(&self, version: u64, value: i64) -> Result<SetIf> {
        self.cas("write the counter", version, value, "set")
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        self.cas("delete the counter", version, 0, "del")
            .map(|r| r == SetIf::Set)
    }

    fn waits(&self) -> &RedisWaits {
        &self.waits
    }

    /// Subscribed before the read, as barriers and groups are. Nothing
    /// of a counter expires unheard (every write publishes), and a
    /// subscription whose connection drops ends its stream, which wakes
    /// the waiter: so a subscribed waiter reads again only after
    /// 10 s without a message, an unsubscribed one every 500 ms.
    async fn read_armed(&self, _epoch: &Epoch) -> Result<(Versioned, Changes)> {
        let heard = self.waits.ear().await;
        let now = self.read().await?;
        let nap = if heard.is_some() { QUIET } else { POLL };
        Ok((now, Nudge::new(heard, None, nap)))
    }
}
