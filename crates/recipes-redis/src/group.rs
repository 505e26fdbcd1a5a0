//! Group membership as the store's verbs of the core group loops
//! ([`recipes_core::store::engine::group`]). Our layout, as Redis has no
//! Curator to follow:
//!
//! - the hash `{recipes}:g:<name>`: each member's id → its data, and the
//!   field `/v` (no id holds `/`) → the group's version;
//! - the hash `{recipes}:go:<name>`: each member's id → the id of the
//!   session it lives on (a member is live while its session key
//!   `{recipes}:s:<session>` exists), and the member listed in that
//!   session's index (`h:<session>`, field `g\n<name>\n<id>`), so the
//!   sweep of expired sessions removes it (`scripts.rs`);
//! - the counter `{recipes}:gv`, shared by every group: every join and
//!   leave — and every read that purges a member whose session expired —
//!   mints its next value as the group's version (on the hybrid clock of
//!   fences, `scripts.rs`: the larger of the last + 1 and the server's
//!   clock in µs), in the same script, and publishes it on
//!   `{recipes}:wake:<name>`, the channel every waiting recipe of a name
//!   uses. An empty group's hashes are gone; its view's version is the
//!   larger of the counter and the clock. So a change's version is above
//!   every version shown before it, after a `FLUSHALL` or an older
//!   snapshot too; a read between such a restore and the next change
//!   shows the snapshot's version, which may be below one shown before (a
//!   reader that compares versions keeps the view it has). A view's
//!   `changes` is `None` (the counter is shared).
//!
//! A member's own field of `go:<name>` is polled every
//! `POLL` (500 ms) while it is joined: a field gone (or
//! another session's) while our session key lives — a restart that lost
//! the join, an older snapshot, a field deleted by hand — is the
//! membership's loss.
//!
//! The verbs are [`RedisWaits`]'s, the one wait store of this crate: its
//! epoch (the client's session), and its ear armed before each read (on
//! the object's one subscribed connection, kept while it waits) with a
//! re-read every 500 ms (a session key's expiry has no event: a crashed
//! member leaves the view within its TTL plus that).

use std::sync::LazyLock;

use recipes_core::store::engine::group::{GroupStore, GroupView, Member};
use recipes_core::store::engine::WaitStore;
use recipes_core::store::{id_taken, until_done, Backoff, EntryWatcher};
use recipes_core::{Error, Result};
use redis::Script;

use crate::barrier::{Changes, Epoch, RedisWaits};
use crate::client::RedisClient;
use crate::names::{other_layout, validate_name, NS};
use crate::scripts::COMMON;
use crate::session::Session;

/// Keys and the refusal of another recipe's name; shared by the scripts.
/// ARGV: ns, name, …
const KEYS: &str = r#"
local name = ARGV[2]
local m, o, gv = ns .. 'g:' .. name, ns .. 'go:' .. name, ns .. 'gv'
local function other()
  if redis.call('EXISTS', ns .. 'size:' .. name) == 1 then return 'a semaphore' end
  if redis.call('EXISTS', ns .. 'q:' .. name) == 1 or redis.call('EXISTS', ns .. 'lock:' .. name) == 1 then
    return 'a lock or election'
  end
  if redis.call('EXISTS', ns .. 'count:' .. name) == 1 then return 'a counter' end
  return ''
end
local function changed() regroup(name) end
-- The field of member `id` in the index of its session `sid` (`h:<sid>`,
-- which the session's sweep reads).
local function indexed(id, sid) return ns .. 'h:' .. sid, 'g\n' .. name .. '\n' .. id end
"#;

// ARGV: ns, name, id, data, session, token → 'ok', 'ours', 'taken',
// 'gone' (our session is) or 'other:<recipe>'.
static JOIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua\n{COMMON}\n{KEYS}\nlocal o2 = other()\nif o2 ~= '' then return 'other:' .. o2 end\n\
         local id, sid = ARGV[3], ARGV[5]\n\
         if redis.call('GET', ns .. 's:' .. sid) ~= ARGV[6] then return 'gone' end\n\
         local owner = redis.call('HGET', o, id)\n\
         if owner then\n\
           if owner == sid then return 'ours' end\n\
           if redis.call('EXISTS', ns .. 's:' .. owner) == 1 then return 'taken' end\n\
           redis.call('HDEL', indexed(id, owner))\n\
         end\n\
         redis.call('HSET', m, id, ARGV[4])\nredis.call('HSET', o, id, sid)\n\
         local h, f = indexed(id, sid)\nredis.call('HSET', h, f, '')\nchanged()\n\
         return 'ok'\n"
    ))
});

// ARGV: ns, name → {'other:<recipe>'} or {version, id1, data1, …}; purges
// members whose session is gone (a change).
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua\n{COMMON}\n{KEYS}\nlocal o2 = other()\nif o2 ~= '' then return {{'other:' .. o2}} end\n\
         local owners = redis.call('HGETALL', o)\nlocal purged = false\n\
         for i = 1, #owners, 2 do\n\
           if redis.call('EXISTS', ns .. 's:' .. owners[i + 1]) == 0 then\n\
             redis.call('HDEL', m, owners[i])\nredis.call('HDEL', o, owners[i])\n\
             redis.call('HDEL', indexed(owners[i], owners[i + 1]))\npurged = true\n\
           end\n\
         end\n\
         if purged then changed() end\n\
         local v = redis.call('HGET', m, '/v')\n\
         if not v then\n\
           v = string.format('%.0f', math.max(tonumber(redis.call('GET', gv) or '0'), micros()))\n\
         end\n\
         local out = {{v}}\n\
         local all = redis.call('HGETALL', m)\n\
         for i = 1, #all, 2 do\n\
           if all[i] ~= '/v' then out[#out + 1] = all[i]\nout[#out + 1] = all[i + 1] end\n\
         end\n\
         return out\n"
    ))
});

// ARGV: ns, name, id, session → 'ok' (removed, or not ours).
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua flags=allow-oom\n{COMMON}\n{KEYS}\nif redis.call('HGET', o, ARGV[3]) == ARGV[4] then\n\
           redis.call('HDEL', m, ARGV[3])\nredis.call('HDEL', o, ARGV[3])\n\
           redis.call('HDEL', indexed(ARGV[3], ARGV[4]))\nchanged()\n\
         end\nreturn 'ok'\n"
    ))
});

/// A Redis group (our layout; see the module).
pub type Group = recipes_core::Group<RedisWaits>;

impl RedisWaits {
    pub(crate) fn group(client: &RedisClient, name: &str) -> Result<RedisWaits> {
        validate_name("group", name)?;
        Ok(RedisWaits::new(client, name, 0))
    }

    fn refused(&self, reply: &str) -> Error {
        let theirs = reply.strip_prefix("other:").unwrap_or(reply);
        other_layout(&self.name, "a group", theirs)
    }
}

/// Names our member: its session, group and id.
#[derive(Debug)]
pub struct Ticket {
    session: std::sync::Arc<Session>,
    client: RedisClient,
    name: String,
    id: String,
}

impl GroupStore for RedisWaits {
    type Ticket = Ticket;

    fn ticket(&self, epoch: &Epoch, id: &str) -> Ticket {
        Ticket {
            session: epoch.0.session.clone(),
            client: self.client.clone(),
            name: self.name.clone(),
            id: id.to_owned(),
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &Ticket, data: &[u8]) -> Result<bool> {
        let redis = self.client.redis()?;
        let sid = epoch.0.session.id();
        let token = self.client.leases().store()?.token(sid);
        let sid_text = sid.to_string();
        let args: [&[u8]; 6] = [
            NS.as_bytes(),
            self.name.as_bytes(),
            ticket.id.as_bytes(),
            data,
            sid_text.as_bytes(),
            token.as_bytes(),
        ];
        let what = format!("join the group {}", self.name);
        // Sent once: a resent join that finds the id ours could not tell a
        // lost reply from a second membership; the engine resends.
        let reply: String = redis
            .once(&what, self.rpc_timeout(), &JOIN, &args)
            .await
            .map_err(|e| match e {
                e if e.is_retryable() => Error::Indeterminate { what: what.clone() },
                e => e,
            })?;
        match reply.as_str() {
            "ok" => Ok(true),
            "ours" => Ok(false),
            "taken" => Err(id_taken(&self.name, &ticket.id)),
            "gone" => {
                epoch
                    .0
                    .session
                    .epoch()
                    .fire(recipes_core::LossReason::SessionExpired);
                Err(Error::SessionExpired)
            }
            other => Err(self.refused(other)),
        }
    }

    async fn read(&self, _epoch: &Epoch, arm: bool) -> Result<(GroupView, Option<Changes>)> {
        let redis = self.client.redis()?;
        // Subscribed before the read: no change after it is missed.
        let watch = match arm {
            true => Some(self.changes(self.ear().await, -1)),
            false => None,
        };
        let args = [NS.to_owned(), self.name.clone()];
        let what = format!("read the group {}", self.name);
        let reply: Vec<Vec<u8>> = redis
            .idempotent(&what, self.rpc_timeout(), &READ, &args)
            .await?;
        let Some((version, rest)) = reply.split_first() else {
            return Err(crate::rpc::unexpected(&what, reply));
        };
        let version = String::from_utf8_lossy(version);
        if let Some(theirs) = version.strip_prefix("other:") {
            return Err(self.refused(theirs));
        }
        let mut members: Vec<Member> = rest
            .chunks(2)
            .filter_map(|pair| match pair {
                [id, data] => Some(Member {
                    id: String::from_utf8_lossy(id).into_owned(),
                    data: data.clone(),
                }),
                _ => None,
            })
            .collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        let view = GroupView {
            members,
            version: version.parse().unwrap_or(0),
            changes: None,
        };
        Ok((view, watch))
    }

    type Member = MemberField;

    fn member(&self, ticket: &Ticket) -> MemberField {
        MemberField {
            client: self.client.clone(),
            owners: format!("{NS}go:{}", self.name),
            id: ticket.id.clone(),
            sid: ticket.session.id().to_string(),
        }
    }

    async fn remove(ticket: Ticket) {
        let session = ticket.session.clone();
        let what = format!("[{}] leave the group {}", session.label(), ticket.name);
        let lost = || session.is_lost();
        until_done(&what, Backoff::RETRY, lost, || async {
            let redis = ticket.client.redis()?;
            let args = [
                NS.to_owned(),
                ticket.name.clone(),
                ticket.id.clone(),
                session.id().to_string(),
            ];
            let timeout = ticket.client.rpc_timeout();
            let _: String = redis.idempotent(&what, timeout, &LEAVE, &args).await?;
            Ok(())
        })
        .await;
    }
}

/// Our member's field of `go:<name>`, followed by core's `watch_held`
/// until it is gone or another session's.
#[derive(Clone)]
pub struct MemberField {
    client: RedisClient,
    owners: String,
    id: String,
    sid: String,
}

impl MemberField {
    async fn ours(&self) -> Result<bool> {
        let mut get = redis::cmd("HGET");
        get.arg(&self.owners).arg(&self.id);
        let c = &self.client;
        let owner: Option<String> = c
            .redis()?
            .read("poll a group member", c.rpc_timeout(), get)
            .await?;
        Ok(owner.as_deref() == Some(self.sid.as_str()))
    }
}

impl EntryWatcher for MemberField {
    type Watch = MemberField;

    async fn watch(&self) -> Result<Option<MemberField>> {
        Ok(self.ours().await?.then(|| self.clone()))
    }

    /// Polled every [`POLL`](crate::contend::POLL).
    async fn deleted(w: &mut MemberField) -> Result<()> {
        loop {
            tokio::time::sleep(crate::contend::POLL).await;
            if !w.ours().await? {
                return Ok(());
            }
        }
    }
}

impl std::fmt::Debug for MemberField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberField")
            .field("owners", &self.owners)
            .field("id", &self.id)
            .finish()
    }
}
