//! The contend driver of every Redis queue — a mutex's, an election's
//! (and so a latch's and a selector's), a semaphore's internal mutex and
//! its permits, a read-write lock's readers and writers: the engine's
//! verbs as scripts (`scripts.rs`). The loop is
//! the engine's ([`recipes_core::store::engine::contend`]).
//!
//! - **enter**: one script — check our session's token, queue our member
//!   (a fresh uuid under our session id, known before it is sent, so a
//!   lost reply still lets us remove it) at the queue's next place, and
//!   read the live members up to ours; when ours holds at once (into an
//!   empty queue, the uncontended path), take it as **confirm** does, in
//!   the same script, and keep the fence for the engine's confirm.
//! - **list**: the same read; entries of expired sessions are swept (and
//!   their going published).
//! - **wait**: subscribe to where the entry ahead's going is published,
//!   then check that it is still live (so a release in between is not
//!   missed) and wait for a message, checking again every [`POLL`]: a lost
//!   message costs one poll, never a TTL.
//! - **confirm**: `SET <lock> <member>` (free, or held by a member whose
//!   session key expired; a permit's or a read-write lock member's own
//!   key holds `<member> <fence>`, what a resent confirm answers) and, only on
//!   a new acquisition, the queue's next fence: the larger of its last
//!   fence + 1 and the server's clock in µs (`scripts.rs`). The script
//!   decides the recipe's rule itself, over the same live members: the
//!   first `n` of a mutex's or a semaphore's, and for a read-write lock
//!   [`Rule::ReadWrite`] over the roles stored beside the queue (which
//!   `list` shows as `<role> <member>`).
//! - **remove**: delete our entry (and the lock, if it holds it), publish
//!   its going, retrying until done or the session is lost.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use recipes_core::store::engine::{ContendDriver, Entered, Listing, Role, Rule};
use recipes_core::store::{until_done, Backoff, LeaseEpoch};
use recipes_core::{Error, LossReason, LossSignal, Result};
use tokio::time::Instant;

use crate::client::RedisClient;
use crate::names::{inside_semaphore, member, other_layout, Mode, Queue};
use crate::queue_scripts;
use crate::rpc::{from_redis, unexpected, Redis};
use crate::session::{Registered, Session, Sessions};

/// How often a waiter (and a holder) checks what it waits on by itself,
/// should a message be lost.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// One acquisition's driver.
pub(crate) struct QueueContender<'a> {
    pub(crate) client: &'a RedisClient,
    pub(crate) queue: &'a Queue,
    /// The candidate's value (empty for a lock; a read-write lock's
    /// member's role, `read` or `write`).
    pub(crate) value: &'a [u8],
    /// The recipe's queue rule, decided inside the confirming script.
    pub(crate) rule: Rule,
}

/// A session as the engine's epoch.
pub(crate) type Epoch = LeaseEpoch<Sessions>;

/// Names our entry before it exists.
#[derive(Clone)]
pub(crate) struct Ticket {
    pub(crate) session: Arc<Session>,
    pub(crate) queue: Queue,
    pub(crate) member: String,
    /// Our member registered as owned by this client while a clone of
    /// the ticket lives (`session.rs`: the client removes the entries of
    /// its session that no ticket owns). None once the client closed.
    _owned: Option<Arc<Registered>>,
}

/// Our entry while it waits: its member, and the subscription of the wait.
pub(crate) struct Entry {
    member: String,
    /// Our member as the queue is listed.
    listed: String,
    listening: Option<(String, redis::aio::PubSubStream)>,
    /// The fence, when the entering script found ours holding and took
    /// it there (the uncontended path: one script, no confirm).
    taken: Option<i64>,
}

/// A win: the ticket and the fence.
pub(crate) struct Acquired {
    pub(crate) ticket: Ticket,
    pub(crate) fence: i64,
}

impl Ticket {
    /// Remove our entry once: it goes, and so does the lock if it holds it.
    pub(crate) async fn remove_once(&self) -> Result<bool> {
        let redis = self.session.store()?.redis;
        let what = format!("remove {}", self.queue.holder(&self.member));
        let args = self.queue.args(&self.member);
        let timeout = self.session.rpc_timeout();
        let held: i64 = redis
            .idempotent(&what, timeout, &queue_scripts::REMOVE, &args)
            .await?;
        redis.replicated(&what).await.ok();
        Ok(held == 1)
    }

    /// Remove our entry, retrying until done or the session is lost (its
    /// entries are then swept once its key expired).
    pub(crate) async fn remove(self) {
        let what = format!("[{}] remove {}", self.session.label(), self.member);
        let lost = || self.session.is_lost();
        until_done(&what, Backoff::RETRY, lost, || async {
            self.remove_once().await.map(drop)
        })
        .await;
    }
}

/// A connection of its own subscribed to `channel`.
pub(crate) async fn subscribe(
    redis: &Redis,
    channel: &str,
    timeout: Duration,
) -> Result<redis::aio::PubSubStream> {
    let what = format!("subscribe to {channel}");
    let open = async {
        let mut pubsub = redis
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| from_redis(&what, e))?;
        pubsub
            .subscribe(channel)
            .await
            .map_err(|e| from_redis(&what, e))?;
        Ok(pubsub.into_on_message())
    };
    recipes_core::store::within(&what, timeout, open).await
}

/// Wait for a message on `stream`, or `poll` finding what we wait for
/// gone, checked every [`POLL`].
pub(crate) async fn message_or<F, Fut>(
    stream: &mut redis::aio::PubSubStream,
    mut poll: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    loop {
        tokio::select! {
            msg = stream.next() => return msg.map(drop).ok_or(Error::ConnectionLoss),
            () = tokio::time::sleep(POLL) => if poll().await? {
                return Ok(());
            }
        }
    }
}

impl QueueContender<'_> {
    fn session_gone(session: &Session) -> Error {
        session.epoch().fire(LossReason::SessionExpired);
        Error::SessionExpired
    }

    fn listing(&self, members: Vec<String>) -> Listing<String> {
        Listing {
            contenders: members,
            revision: 0,
        }
    }
}

impl ContendDriver for QueueContender<'_> {
    type Epoch = Epoch;
    type Ticket = Ticket;
    type Entry = Entry;
    type Id = String;
    type Won = Acquired;

    fn rule(&self) -> Rule {
        self.rule
    }

    /// A read-write lock's members are listed with their role.
    fn role(&self, id: &String) -> Role {
        match (self.rule, id.split_once(' ')) {
            (Rule::ReadWrite, Some(("read", _))) => Role::Reader,
            (Rule::ReadWrite, _) => Role::Writer,
            (Rule::Mutex, _) => Role::Mutex,
            (Rule::Latch, _) => Role::Participant,
            (Rule::Leases(_), _) => Role::Permit,
        }
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: the session's expiry removes the entry",
                self.queue.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<Epoch>> {
        self.client.leases().epoch().await.map(Some)
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.session.epoch().signal()
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        let member = member(epoch.session.id());
        let owned = epoch.session.store_ref().ok().map(|s| s.register(&member));
        Ticket {
            session: epoch.session.clone(),
            queue: self.queue.clone(),
            member,
            _owned: owned.map(Arc::new),
        }
    }

    async fn enter(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<Entered<Self>> {
        let session = &epoch.session;
        let store = session.store()?;
        let mut args: Vec<Vec<u8>> = self
            .queue
            .args(&ticket.member)
            .into_iter()
            .map(String::into_bytes)
            .collect();
        args.push(store.token(session.id()).into_bytes());
        args.push(self.value.to_vec());
        args.push(self.queue.conflict.clone().into_bytes());
        args.push(self.queue.inside.clone().into_bytes());
        // Take it in the same script when ours holds, unless the rule
        // holds nothing.
        let take = match self.rule.holders() {
            Some(0) => String::new(),
            holders => holders.unwrap_or(0).to_string(),
        };
        args.push(take.into_bytes());
        args.push(self.queue.fence_key().into_bytes());
        let what = format!("enter {}", self.queue.name);
        let reply: redis::Value = store
            .redis
            .idempotent(&what, session.rpc_timeout(), &queue_scripts::ENTER, &args)
            .await?;
        let (code, members, taken) = entered(&what, &reply)?;
        match code {
            0 => {}
            -1 => return Err(Self::session_gone(session)),
            -2 => {
                let ours = self.queue.recipe();
                return Err(other_layout(&self.queue.name, ours, "a semaphore"));
            }
            -3 => return Err(inside_semaphore(&self.queue.name)),
            -4 => {
                let theirs = members.first().map_or("another recipe", String::as_str);
                return Err(other_layout(&self.queue.name, self.queue.recipe(), theirs));
            }
            _ => return Err(unexpected(&what, reply)),
        }
        log::debug!(
            "[{}] {} queued",
            session.label(),
            self.queue.holder(&ticket.member)
        );
        let entry = Entry {
            member: ticket.member.clone(),
            listed: self.queue.listed(&ticket.member, self.value),
            listening: None,
            taken,
        };
        Ok((entry, Some(self.listing(members))))
    }

    fn ours<'e>(&self, entry: &'e Entry) -> &'e String {
        &entry.listed
    }

    async fn list(&self, epoch: &Epoch, entry: &mut Entry) -> Result<Listing<String>> {
        let redis = epoch.session.store()?.redis;
        let members = redis
            .list(self.queue, &entry.member, epoch.session.rpc_timeout())
            .await?;
        Ok(self.listing(members))
    }

    /// Subscribed anew, a lock waiter checks the entry ahead itself
    /// instead of asking for a read of the queue: a release between the
    /// read and the subscription is seen, and a waiter whose entry ahead
    /// stays reads nothing (one read per release, for the one behind it).
    async fn wait(&self, epoch: &Epoch, entry: &mut Entry, ahead: &String) -> Result<()> {
        let redis = epoch.session.store()?.redis;
        let timeout = epoch.session.rpc_timeout();
        let ahead = Queue::member_of(ahead);
        let channel = self.queue.channel(ahead);
        let gone = || async {
            if self.queue.mode == Mode::Permit {
                // The one permit waiter: read the queue again.
                return Ok(true);
            }
            let mut args = self.queue.args(ahead);
            // A reader waits on a writer: a downgrade (its role now
            // `read`) lets it in as the writer's going does, so the poll
            // sees it even when the message is lost.
            if self.value == b"read" {
                args.push("reader".into());
            }
            let live: i64 = redis
                .once("poll", timeout, &queue_scripts::ALIVE, &args)
                .await?;
            Ok(live == 0)
        };
        if !matches!(&entry.listening, Some((on, _)) if *on == channel) {
            entry.listening = None;
            let stream = subscribe(&redis, &channel, timeout).await?;
            entry.listening = Some((channel, stream));
            if gone().await? {
                return Ok(());
            }
        }
        let Some((_, stream)) = entry.listening.as_mut() else {
            return Ok(());
        };
        let waited = message_or(stream, gone).await;
        if waited.is_err() {
            entry.listening = None;
        }
        waited
    }

    async fn confirm(
        &self,
        epoch: &Epoch,
        entry: &mut Entry,
        _listing: &Listing<String>,
    ) -> Result<Option<i64>> {
        if let Some(fence) = entry.taken.take() {
            return Ok(Some(fence));
        }
        let session = &epoch.session;
        let store = session.store()?;
        let mut args = self.queue.args(&entry.member);
        args.push(store.token(session.id()));
        args.push(self.holders().to_string());
        args.push(self.queue.fence_key());
        let what = format!("confirm {}", self.queue.holder(&entry.member));
        let timeout = session.rpc_timeout();
        let fence: i64 = store
            .redis
            .idempotent(&what, timeout, &queue_scripts::CONFIRM, &args)
            .await?;
        match fence {
            -1 => Ok(None),
            -2 => Err(Error::Backend {
                message: format!("{what}: the lock is still held by another; reading again"),
                retryable: true,
                source: None,
            }),
            fence if fence > 0 => Ok(Some(fence)),
            other => Err(unexpected(&what, other)),
        }
    }

    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        ticket.remove()
    }

    fn won(&self, _epoch: Epoch, ticket: Ticket, _entry: Entry, fence: i64) -> Acquired {
        Acquired { ticket, fence }
    }
}

impl QueueContender<'_> {
    /// How many at the head of the queue hold, as the store's own
    /// decision counts them; unused for a read-write lock, whose script
    /// decides over the roles.
    fn holders(&self) -> usize {
        self.rule.holders().unwrap_or(0)
    }
}

/// `ENTER`'s reply: its code, the live members up to ours, and the fence
/// when ours was taken in the same script.
fn entered(what: &str, reply: &redis::Value) -> Result<(i64, Vec<String>, Option<i64>)> {
    if let Ok((code, members, fence)) = redis::from_redis_value(reply) {
        return Ok((code, members, Some(fence)));
    }
    if let Ok((code, members)) = redis::from_redis_value(reply) {
        return Ok((code, members, None));
    }
    let (code,) = redis::from_redis_value::<(i64,)>(reply).map_err(|_| unexpected(what, reply))?;
    Ok((code, vec![], None))
}
