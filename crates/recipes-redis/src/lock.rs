//! [`RedisLock`]: a held Redis entry as core's
//! [`HeldEntry`](recipes_core::store::HeldEntry) — its loss poll, its removal,
//! and writes fenced by a script that writes only while the lock key (a
//! permit's key) holds our member.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use recipes_core::store::{
    fire_if_refused, refuse_if_lost, watch_held, EntryWatcher, FencedWrite, HeldEntry, LossTrigger,
    PresencePoll, Runtime, StoreEntry,
};
use recipes_core::{Error, FencingToken, Result};
use redis::FromRedisValue;

use crate::client::RedisClient;
use crate::contend::{Acquired, Ticket};
use crate::names::{holds, validate_key, NS};
use crate::rpc::{from_redis, Redis};
use crate::scripts;

/// A held Redis entry: the lease behind a [`MutexGuard`](crate::MutexGuard),
/// a [`SemaphorePermit`](crate::SemaphorePermit) and a
/// [`Leadership`](crate::Leadership). Its fenced writes are scripts that
/// write only while the lock key still holds our member — while no other
/// holder can exist.
pub type RedisLock = HeldEntry<RedisEntry>;

/// The Redis side of a [`RedisLock`]: our member of the queue, the key
/// that records it holds, and its session.
#[derive(Clone)]
pub struct RedisEntry {
    client: RedisClient,
    ticket: Ticket,
    holder: String,
    hold_key: String,
    kind: &'static str,
    /// The holding's loss: a fenced write is refused once it fired, and
    /// fires it when the store refuses one.
    trigger: LossTrigger,
}

/// How a held entry is polled: its hold key still holds its member.
#[derive(Clone)]
struct Holding {
    redis: Redis,
    hold_key: String,
    member: String,
    timeout: Duration,
    /// The client's one poll of its held entries.
    poll: PresencePoll<(String, String)>,
}

impl Holding {
    async fn holds(&self) -> Result<bool> {
        let mut get = redis::cmd("GET");
        get.arg(&self.hold_key);
        let value: Option<String> = self
            .redis
            .read("poll a held entry", self.timeout, get)
            .await?;
        Ok(holds(value.as_deref(), &self.member))
    }
}

impl EntryWatcher for Holding {
    type Watch = Holding;

    async fn watch(&self) -> Result<Option<Holding>> {
        Ok(self.holds().await?.then(|| self.clone()))
    }

    /// Within a [`POLL`](crate::contend::POLL) of the client's one poll
    /// of its held entries (an `MGET` of their hold keys): a lock key
    /// deleted by hand, or lost with a restart or a failover.
    async fn deleted(watch: &mut Holding) -> Result<()> {
        let entry = (watch.hold_key.clone(), watch.member.clone());
        watch.poll.gone(entry).await;
        Ok(())
    }
}

impl RedisEntry {
    /// Hold what `a` won and poll it (its loss is loss); `kind` names it in
    /// messages. With replicas to wait for, the acquisition is undone and
    /// fails when too few acknowledged it.
    pub(crate) async fn held(
        client: RedisClient,
        a: Acquired,
        kind: &'static str,
    ) -> Result<RedisLock> {
        let session = a.ticket.session.clone();
        let redis = session.store()?.redis;
        let holder = a.ticket.queue.holder(&a.ticket.member);
        if let Err(e) = redis.replicated(&holder).await {
            a.ticket.remove().await;
            return Err(e);
        }
        let trigger = session.epoch().trigger().child();
        let hold_key = a.ticket.queue.hold_key(&a.ticket.member);
        let holding = Holding {
            redis,
            hold_key: hold_key.clone(),
            member: a.ticket.member.clone(),
            timeout: session.rpc_timeout(),
            poll: client.held_poll().clone(),
        };
        let (watched, label, shown) = (trigger.clone(), session.label().to_owned(), holder.clone());
        client.runtime().handle().spawn(async move {
            // Just confirmed by the script that took it: no read before
            // the client's poll of its held entries looks after it.
            let confirmed = Some(holding.clone());
            watch_held(&holding, &label, &shown, confirmed, &watched).await;
        });
        let token = FencingToken(a.fence.unsigned_abs());
        let entry = RedisEntry {
            client,
            ticket: a.ticket,
            holder,
            hold_key,
            kind,
            trigger: trigger.clone(),
        };
        Ok(HeldEntry::new(entry, trigger, token))
    }

    /// Our member of the queue, and its session.
    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// The key whose value says this entry holds: the lock key
    /// `{recipes}:lock:<name>`, or the permit's own key.
    pub fn hold_key(&self) -> &str {
        &self.hold_key
    }

    /// Run `body` (Lua, with `KEYS` and `ARGV` as given) atomically, only
    /// while this entry holds: the general fenced write. The keys must be
    /// outside the recipes' own (`{recipes}:*`).
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] when the entry no longer holds (nothing
    /// ran; its loss signal fires), or its loss signal had fired (nothing
    /// was sent); [`Error::Indeterminate`] when no reply came;
    /// [`Error::InvalidArgument`] for a key of ours; the script's errors.
    pub fn fenced_script<T>(&self, body: &str, keys: &[&str], args: &[&[u8]]) -> Result<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        if let Some(k) = keys.iter().find(|k| k.starts_with(NS)) {
            return Err(Error::invalid(format!(
                "a fenced script on {k} would touch the recipes' own keys ({NS}*); \
                 use keys outside them"
            )));
        }
        let what = "fenced script";
        refuse_if_lost(&self.trigger.signal(), what, &self.holder)?;
        let script = scripts::fenced_body(body);
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let this = self.clone();
        let done = self.client.call(what, async move {
            let redis = this.ticket.session.store()?.redis;
            let mut invocation = script.prepare_invoke();
            keys.iter().for_each(|k| {
                invocation.key(k);
            });
            invocation.key(&this.hold_key);
            args.iter().for_each(|a| {
                invocation.arg(a);
            });
            invocation.arg(&this.ticket.member);
            let mut conn = redis.conn.clone();
            let reply = invocation.invoke_async(&mut conn).await;
            let value: T = match reply {
                Err(e) if e.code() == Some("FENCED") => return Err(this.rejected(what)),
                other => other.map_err(|e| from_redis(what, e))?,
            };
            redis.replicated(what).await?;
            Ok(value)
        });
        self.seen(done)
    }

    /// Set `key` to `value` only while this entry holds.
    ///
    /// # Errors
    ///
    /// As for [`fenced_script`](RedisEntry::fenced_script).
    pub fn fenced_set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<()> {
        let write = FencedWrite::Put {
            key: key.to_owned(),
            value: value.as_ref().to_vec(),
        };
        self.write_now("fenced set", write)
    }

    /// Delete `key` only while this entry holds.
    ///
    /// # Errors
    ///
    /// As for [`fenced_script`](RedisEntry::fenced_script).
    pub fn fenced_del(&self, key: &str) -> Result<()> {
        let write = FencedWrite::Delete {
            key: key.to_owned(),
        };
        self.write_now("fenced del", write)
    }

    fn write_now(&self, what: &'static str, write: FencedWrite) -> Result<()> {
        refuse_if_lost(&self.trigger.signal(), what, &self.holder)?;
        let fut = self.clone().write(what, write);
        self.seen(self.client.call(what, fut))
    }

    /// A fenced write's outcome: a refusal fires the holding's loss at
    /// once; no reply is [`Error::Indeterminate`].
    fn seen<T>(&self, done: Result<T>) -> Result<T> {
        fire_if_refused(&self.trigger, done).map_err(Error::unconfirmed)
    }

    fn rejected(&self, what: &str) -> Error {
        Error::FenceRejected {
            what: format!(
                "{what}: our {} {} no longer holds {}",
                self.kind, self.holder, self.hold_key
            ),
        }
    }
}

impl StoreEntry for RedisEntry {
    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn session_id(&self) -> i64 {
        self.ticket.session.id()
    }

    fn label(&self) -> &str {
        self.ticket.session.label()
    }

    /// Keys below the recipe's name (where its entries are shown: a
    /// forged contender, our own), and every key of ours.
    fn inside_layout(&self, key: &str) -> Option<&str> {
        if key.starts_with(NS) {
            return Some(NS);
        }
        let queue = &self.ticket.queue.name;
        let root = match self.kind {
            "permit" => queue.strip_suffix("/leases").unwrap_or(queue),
            _ => queue,
        };
        let below = key
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'));
        below.then_some(root)
    }

    async fn delete(self) -> Result<()> {
        self.ticket.remove_once().await.map(drop)
    }

    fn delete_until_done(self) -> impl Future<Output = ()> + Send + 'static {
        self.ticket.remove()
    }

    fn write(
        self,
        what: &'static str,
        write: FencedWrite,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let checked = match &write {
            FencedWrite::Put { key, .. } | FencedWrite::Delete { key } => validate_key(key),
            FencedWrite::Proclaim { .. } => Ok(()),
        };
        let (op, key, value): (&str, String, Vec<u8>) = match write {
            FencedWrite::Put { key, value } => ("set", key, value),
            FencedWrite::Delete { key } => ("del", key, vec![]),
            FencedWrite::Proclaim { value } => ("proclaim", String::new(), value),
        };
        async move {
            checked?;
            let t = &self.ticket;
            let redis = t.session.store()?.redis;
            let args: Vec<Vec<u8>> = vec![
                NS.into(),
                self.hold_key.clone().into(),
                t.member.clone().into(),
                op.into(),
                key.into(),
                value,
                t.queue.name.clone().into(),
            ];
            let timeout = t.session.rpc_timeout();
            let written: i64 = redis.once(what, timeout, &scripts::FENCED, &args).await?;
            if written != 1 {
                return Err(self.rejected(what));
            }
            redis.replicated(what).await
        }
    }
}

impl fmt::Debug for RedisEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisEntry")
            .field("holder", &self.holder)
            .field("hold_key", &self.hold_key)
            .finish()
    }
}
