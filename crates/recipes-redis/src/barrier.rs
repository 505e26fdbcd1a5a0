//! Barrier and double barrier on Redis, as the store's verbs of the core
//! wait shape ([`recipes_core::store::engine::gather`]): each verb one
//! script (`barrier_scripts.rs`); the keys are described on
//! [`RedisWaits`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::gather::{
    BarrierStore, DoubleBarrierStore, Flag, Gathering, Member,
};
use recipes_core::store::engine::{Nudge, WaitStore};
use recipes_core::store::{check_count, quote, until_done, Backoff, LeaseEpoch, OnRuntime};
use recipes_core::{Error, LossReason, LossSignal, Result};
use redis::Script;

use crate::barrier_scripts as scripts;
use crate::client::RedisClient;
use crate::contend::POLL;
use crate::ears::{Ear, Ears};
use crate::names::{member, validate_name, NS};
use crate::rpc::Redis;
use crate::session::{Session, Sessions};

/// A barrier, double barrier or group on one name of a client: the one
/// wait store of this crate (a group's keys are in `group.rs`).
///
/// Keys (below `{recipes}:`, as every recipe's):
///
/// - **Barrier**: `barrier:<name>` exists while it is set plainly (it
///   stays when the setter dies); a set
///   [tied to the session](recipes_core::Barrier::tied_to_session) is a
///   member `<session id>-<uuid>` of the name's queue `q:<name>`, its
///   role `barrier` in `r:<name>`, listed among its session's entries
///   (`h:<id>`), so it goes with the session. The barrier is up while
///   the key exists or such a member is live.
/// - **Double barrier**: a member is such a member of `q:<name>`, role
///   `double`, at the next place of the name's counter `n:<name>`; the
///   flag `ready:<name>` holds the place it was set at (above every member
///   who entered before it). The last one out clears the flag; the queue,
///   counter and roles go with their last member.
///
/// Waiting: every change is published on `wake:<name>` (a member's
/// entry, a revoke's removal of a session's members, the barrier's
/// removal, the flag's setting, the sweep of an expired session's
/// members by another client's renewal); a waiter arms its ear on that
/// channel before each read, so it misses nothing after it. The waits
/// of one recipe object share one subscribed connection, kept while
/// they wait (`ears.rs`): an idle waiter's re-reads open none. A
/// session key's expiry itself publishes nothing: a waiter reads again
/// when the earliest session it depends on would expire (the read
/// sweeps the dead members), and every 500 ms should a message be
/// lost.
///
/// A name holds one recipe: a barrier or double barrier on a lock's,
/// election's, semaphore's, counter's or the other barrier's name is
/// refused with [`Error::InvalidArgument`]; a mutex or election on a
/// double barrier's or tied barrier's name is refused by the queue's
/// roles.
#[derive(Debug, Clone)]
pub struct RedisWaits {
    pub(crate) client: RedisClient,
    pub(crate) name: String,
    pub(crate) count: u32,
    /// The subscription of this object's waits.
    ears: Ears,
}

/// A Redis barrier (see [`RedisWaits`] for its keys).
pub type Barrier = recipes_core::Barrier<RedisWaits>;
/// A Redis double barrier (see [`RedisWaits`] for its keys).
pub type DoubleBarrier = recipes_core::DoubleBarrier<RedisWaits>;

/// What every script replies: code, least TTL, flag, members, what.
type Reply = (i64, i64, i64, Vec<String>, String);

impl RedisWaits {
    /// The waits of `name` (a name already validated).
    pub(crate) fn new(client: &RedisClient, name: &str, count: u32) -> RedisWaits {
        RedisWaits {
            client: client.clone(),
            name: name.to_owned(),
            count,
            ears: Ears::new(format!("{NS}wake:{name}")),
        }
    }

    pub(crate) fn barrier(client: &RedisClient, name: &str) -> Result<RedisWaits> {
        validate_name("barrier", name)?;
        Ok(RedisWaits::new(client, name, 0))
    }

    pub(crate) fn double(client: &RedisClient, name: &str, count: u32) -> Result<RedisWaits> {
        validate_name("double barrier", name)?;
        check_count(&format!("the Redis double barrier {}", quote(name)), count)?;
        Ok(RedisWaits::new(client, name, count))
    }

    /// Run `script` (ARGV: ns, name, `more`), resent after a retryable
    /// failure (every script is idempotent); a name of another recipe is
    /// refused.
    async fn run(&self, what: &str, script: &Script, more: &[String], ours: &str) -> Result<Reply> {
        let mut args = vec![NS.to_owned(), self.name.clone()];
        args.extend_from_slice(more);
        let what = format!("{what} {}", self.name);
        let reply: Reply = self
            .redis()?
            .idempotent(&what, self.rpc_timeout(), script, &args)
            .await?;
        if reply.0 == -1 {
            return Err(Error::invalid(format!(
                "the Redis name {} holds another recipe ({}), so {ours} cannot use it; \
                 choose another name for it",
                quote(&self.name),
                reply.4
            )));
        }
        Ok(reply)
    }

    fn redis(&self) -> Result<Redis> {
        self.client.redis()
    }

    /// Arm our ear before a read: `None` (poll) when the subscription
    /// failed.
    pub(crate) async fn ear(&self) -> Option<Ear> {
        self.ears
            .arm(&self.client)
            .await
            .map_err(|e| log::debug!("[{}] not subscribed ({e}); polling", self.name))
            .ok()
    }

    pub(crate) fn changes(&self, heard: Option<Ear>, least_ms: i64) -> Changes {
        let left = u64::try_from(least_ms).ok().map(Duration::from_millis);
        Nudge::new(heard, left, POLL)
    }
}

/// The session a wait or a member lives on.
pub struct Epoch(pub(crate) LeaseEpoch<Sessions>);

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Epoch({})", self.0.session.id())
    }
}

/// What a read armed: the name's channel, and when to read again anyway.
pub type Changes = Nudge<Ear>;

impl OnRuntime for RedisWaits {
    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.client.runtime()
    }
}

impl WaitStore for RedisWaits {
    type Epoch = Epoch;
    type Watch = Changes;

    fn name(&self) -> &str {
        &self.name
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: the session's end removes our member",
                self.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self) -> Result<Epoch> {
        self.client.leases().epoch().await.map(Epoch)
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.0.session.epoch().signal()
    }

    async fn changed(&self, _epoch: &Epoch, watch: Changes) -> Result<()> {
        watch.wait(Ear::heard).await;
        Ok(())
    }
}

impl BarrierStore for RedisWaits {
    /// Read first: a barrier found down needs no subscription (the first
    /// opens a connection); one found up is read again once subscribed,
    /// so no removal after that read is missed.
    async fn is_set(&self, _epoch: &Epoch) -> Result<(bool, Changes)> {
        let read = || self.run("read the barrier", &scripts::IS_SET, &[], "a barrier");
        let (up, least, ..) = read().await?;
        if up != 1 {
            return Ok((false, self.changes(None, least)));
        }
        let heard = self.ear().await;
        let (up, least, ..) = read().await?;
        Ok((up == 1, self.changes(heard, least)))
    }

    async fn set(&self, epoch: &Epoch, tied: bool) -> Result<()> {
        let session = &epoch.0.session;
        let token = session.store()?.token(session.id());
        let more = [
            if tied { "1" } else { "0" }.to_owned(),
            member(session.id()),
            token,
        ];
        let (code, ..) = self
            .run("set the barrier", &scripts::SET, &more, "a barrier")
            .await?;
        if code == -2 {
            return Err(session_gone(session));
        }
        Ok(())
    }

    async fn remove(&self, _epoch: &Epoch) -> Result<()> {
        self.run("remove the barrier", &scripts::REMOVE, &[], "a barrier")
            .await
            .map(drop)
    }
}

fn session_gone(session: &Session) -> Error {
    session.epoch().fire(LossReason::SessionExpired);
    Error::SessionExpired
}

/// Names our member before it exists.
#[derive(Debug)]
pub struct Ticket {
    waits: RedisWaits,
    session: Arc<Session>,
    member: String,
}

impl DoubleBarrierStore for RedisWaits {
    type Ticket = Ticket;

    fn count(&self) -> u32 {
        self.count
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        Ticket {
            waits: self.clone(),
            session: epoch.0.session.clone(),
            member: member(epoch.0.session.id()),
        }
    }

    async fn join(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<i64> {
        let session = &epoch.0.session;
        let token = session.store()?.token(session.id());
        let more = [ticket.member.clone(), token];
        let (code, place, ..) = self
            .run(
                "enter the double barrier",
                &scripts::JOIN,
                &more,
                "a double barrier",
            )
            .await?;
        if code == -2 {
            return Err(session_gone(session));
        }
        Ok(place)
    }

    fn is_ours(ticket: &Ticket, member: &str) -> bool {
        ticket.member == member
    }

    async fn read(&self, _epoch: &Epoch) -> Result<(Gathering, Changes)> {
        let heard = self.ear().await;
        let (_, least, flag, placed, _) = self
            .run(
                "read the double barrier",
                &scripts::READ,
                &[],
                "a double barrier",
            )
            .await?;
        let flag = (flag > 0).then_some(Flag {
            set_at: flag,
            version: flag,
        });
        // Each member followed by its place.
        let members = (placed.chunks(2))
            .map(|pair| Member {
                name: pair[0].clone(),
                created: pair.get(1).and_then(|at| at.parse().ok()),
            })
            .collect();
        Ok((Gathering { flag, members }, self.changes(heard, least)))
    }

    async fn mark(&self, _epoch: &Epoch, stale: Option<Flag>) -> Result<()> {
        let seen = stale.map_or(0, |f| f.version).to_string();
        // Not set: another set it since our read; we read again.
        self.run(
            "set the flag of",
            &scripts::MARK,
            &[seen],
            "a double barrier",
        )
        .await
        .map(drop)
    }

    async fn unmark(&self, _epoch: &Epoch, flag: Flag) -> Result<()> {
        let more = [flag.version.to_string()];
        self.run(
            "clear the flag of",
            &scripts::UNMARK,
            &more,
            "a double barrier",
        )
        .await
        .map(drop)
    }

    fn remove(ticket: Ticket) -> impl Future<Output = ()> + Send + 'static {
        remove_member(ticket)
    }
}

/// Remove our member, retrying until done or its session is lost (its
/// members are then swept once its key expired).
async fn remove_member(ticket: Ticket) {
    let what = format!("[{}] leave {}", ticket.session.label(), ticket.waits.name);
    let lost = || ticket.session.is_lost();
    let more = [ticket.member.clone()];
    until_done(&what, Backoff::RETRY, lost, || async {
        let waits = &ticket.waits;
        let left = waits.run("leave", &scripts::LEAVE, &more, "a double barrier");
        left.await.map(drop)
    })
    .await;
}
