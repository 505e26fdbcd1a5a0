//! A barrier and a double barrier on the wait shape
//! ([`wait_until`]): the store's verbs
//! ([`BarrierStore`], [`DoubleBarrierStore`]) and the conditions, written
//! once.
//!
//! A double barrier's member is an entry in the store under the member's
//! session, as Curator's (`<path>/<uuid>`) and etcd's
//! (`<key>/waiters/<id>`) are; its flag `ready` is persistent. Every
//! store orders the members' creations and the flag's settings in one
//! order (ZooKeeper's zxid, etcd's revision, a place of the name's own
//! counter). The rules:
//!
//! - **enter** creates our member, then waits until the flag was set
//!   *after* our member was created, or until `count` members are there —
//!   then it sets the flag itself (set again if a stale one was there).
//!   So a flag left by an earlier round never lets anyone past: nobody
//!   passes before `count` members entered in its round. A timed-out,
//!   failed or dropped enter removes our member. When our member vanishes
//!   (our session ended) the enter starts over with a new one.
//! - **leave** removes our member, then waits until no member created
//!   *before the flag* is left (none when no flag is set), and clears the
//!   flag if nobody at all is left and it is still the one it read. The
//!   members of our round were all created before the flag our round
//!   passed, and that flag is the one read or an earlier one (a flag is
//!   only cleared when nobody is in, and then our round is gone); a member
//!   created after the flag has entered a later round and may wait in
//!   enter for us to come back, so it is not waited for. A member created
//!   before the flag passes enter as soon as it reads it, so a leave never
//!   waits for one held in enter. A member whose process dies leaves with
//!   its session: the others' enter waits for one more member (a smaller
//!   count gathered), their leave ends when the session's entry goes.

use std::collections::HashMap;
use std::future::Future;

use tokio::time::Instant;

use super::undo::{Undo, Undoer};
use super::wait::{wait_until, Check, Condition, WaitStore};
use crate::error::Result;
use crate::loss::LossSignal;

/// A barrier's verbs: a flag that exists or not.
pub trait BarrierStore: WaitStore {
    /// Whether the barrier is up, with a notification armed on its next
    /// change.
    fn is_set(
        &self,
        epoch: &Self::Epoch,
    ) -> impl Future<Output = Result<(bool, Self::Watch)>> + Send;

    /// Put the barrier up (nothing if it is up); `tied`: under our
    /// session, so that it goes with it.
    fn set(&self, epoch: &Self::Epoch, tied: bool) -> impl Future<Output = Result<()>> + Send;

    /// Take the barrier down (nothing if it is down).
    fn remove(&self, epoch: &Self::Epoch) -> impl Future<Output = Result<()>> + Send;
}

/// The flag of a double barrier, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// When it was last set, in the order the store gives its members'
    /// creations (ZooKeeper's zxid, etcd's revision, a sequence).
    pub set_at: i64,
    /// Its version, for a removal only if it is still this one.
    pub version: i64,
}

/// A double barrier as read: the flag and the members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathering {
    /// The flag, if there is one.
    pub flag: Option<Flag>,
    /// The members, ours included if it is there.
    pub members: Vec<Member>,
}

/// A member of a double barrier, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name, as [`DoubleBarrierStore::is_ours`] takes it.
    pub name: String,
    /// When it was created, in [`Flag::set_at`]'s order; `None` when the
    /// read does not give it (a ZooKeeper listing has names only):
    /// [`DoubleBarrierStore::created`] reads it when it is needed.
    pub created: Option<i64>,
}

/// A double barrier's verbs.
pub trait DoubleBarrierStore: WaitStore {
    /// Names our member before it exists, enough to remove it even when
    /// the create's reply is lost.
    type Ticket: Send + Sync + 'static;

    /// How many members the barrier gathers.
    fn count(&self) -> u32;

    /// A fresh name for our member under `epoch`.
    fn ticket(&self, epoch: &Self::Epoch) -> Self::Ticket;

    /// Create our member; returns when it was created, in [`Flag::set_at`]'s
    /// order.
    fn join(
        &self,
        epoch: &Self::Epoch,
        ticket: &mut Self::Ticket,
    ) -> impl Future<Output = Result<i64>> + Send;

    /// Whether `member` (a name [`read`](DoubleBarrierStore::read) lists)
    /// is the one `ticket` names.
    fn is_ours(ticket: &Self::Ticket, member: &str) -> bool;

    /// Read the flag, then the members, with a notification armed on the
    /// next change of either. The flag is read first, so that members
    /// found gone after it are gone after that flag was set.
    fn read(
        &self,
        epoch: &Self::Epoch,
    ) -> impl Future<Output = Result<(Gathering, Self::Watch)>> + Send;

    /// When `member` (a name [`read`](DoubleBarrierStore::read) listed
    /// without [`Member::created`]) was created; `None` when it is gone.
    /// Asked only of a store whose read leaves creations out; the default
    /// says that the store's read gives them.
    fn created(
        &self,
        epoch: &Self::Epoch,
        member: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send {
        let _ = epoch;
        let what = format!(
            "the double barrier {}: its store's read gave no creation for {member}",
            self.name()
        );
        async move {
            Err(crate::Error::Backend {
                message: what,
                retryable: false,
                source: None,
            })
        }
    }

    /// Set the flag (again, if `stale` is the one there).
    fn mark(
        &self,
        epoch: &Self::Epoch,
        stale: Option<Flag>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Remove the flag if it is still `flag`.
    fn unmark(&self, epoch: &Self::Epoch, flag: Flag) -> impl Future<Output = Result<()>> + Send;

    /// Remove the member `ticket` names, retrying until done or its
    /// session is gone (which removes it anyway).
    fn remove(ticket: Self::Ticket) -> impl Future<Output = ()> + Send + 'static;
}

/// A barrier is down.
struct Down;

impl<S: BarrierStore> Condition<S> for Down {
    type Out = ();

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<(), S::Watch>> {
        Ok(match store.is_set(epoch).await? {
            (false, _) => Check::Holds(()),
            (true, watch) => Check::Wait(watch),
        })
    }
}

/// Wait until the barrier is down (`true`) or `deadline` passes.
///
/// # Errors
///
/// As for [`wait_until`].
pub async fn barrier_wait<S: BarrierStore>(store: &S, deadline: Option<Instant>) -> Result<bool> {
    Ok(wait_until(store, &mut Down, deadline).await?.is_some())
}

/// What an entered member holds: its ticket, and its session's signal.
pub struct Joined<S: DoubleBarrierStore> {
    /// Names our member.
    pub ticket: S::Ticket,
    /// Fires when our member's session is lost (and our member with it).
    pub lost: LossSignal,
}

impl<S: DoubleBarrierStore> std::fmt::Debug for Joined<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joined").field("lost", &self.lost).finish()
    }
}

struct Members<'s, S>(&'s S);

impl<S> Clone for Members<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Members<'_, S> {}

impl<S: DoubleBarrierStore> Undoer for Members<'_, S> {
    type Ticket = S::Ticket;

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    fn undo(ticket: S::Ticket) -> impl Future<Output = ()> + Send + 'static {
        S::remove(ticket)
    }
}

/// Entering: our member (created under the current epoch), then the wait
/// for the flag or the count.
struct Entering<'s, S: DoubleBarrierStore> {
    store: &'s S,
    /// Our member, its epoch's signal and when it was created (`None`
    /// until a join's reply said so).
    ours: Option<(Undo<Members<'s, S>>, LossSignal, Option<i64>)>,
}

impl<'s, S: DoubleBarrierStore> Condition<S> for Entering<'s, S> {
    type Out = ();

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<(), S::Watch>> {
        if self
            .ours
            .as_ref()
            .is_some_and(|(_, lost, _)| lost.is_lost())
        {
            // A member of an ended epoch went with it: removing it again
            // costs nothing; then a new one.
            if let Some((mut old, _, _)) = self.ours.take() {
                old.run().await;
            }
        }
        let (undo, _, created) = self.ours.get_or_insert_with(|| {
            let undo = Undo::new(Members(self.store), store.ticket(epoch));
            (undo, store.epoch_signal(epoch), None)
        });
        let created = match created {
            Some(created) => *created,
            // The same ticket again after a lost reply: the store finds
            // ours if it landed, so a member never withdraws for a lost
            // reply (others may have counted it).
            None => match store.join(epoch, undo.ticket()).await {
                Ok(at) => *created.insert(at),
                Err(e) if transient(&e) => {
                    log::debug!("double barrier {}: joining failed: {e}", store.name());
                    return Err(retry_later(e));
                }
                Err(e) => return Err(e),
            },
        };
        let (seen, watch) = store.read(epoch).await?;
        let ticket = undo.ticket();
        if !seen.members.iter().any(|m| S::is_ours(ticket, &m.name)) {
            log::debug!("double barrier {}: our member vanished", store.name());
            if let Some((mut gone, _, _)) = self.ours.take() {
                gone.run().await;
            }
            return Ok(Check::Restart);
        }
        if seen.flag.is_some_and(|f| f.set_at > created) {
            return Ok(Check::Holds(()));
        }
        if seen.members.len() >= store.count() as usize {
            return match store.mark(epoch, seen.flag).await {
                Ok(()) => Ok(Check::Holds(())),
                // Read again: the flag shows whether it landed.
                Err(e) if transient(&e) => Ok(Check::Restart),
                Err(e) => Err(e),
            };
        }
        Ok(Check::Wait(watch))
    }
}

/// Enter the double barrier: create our member and wait until `count`
/// members entered (`Some`), or until `deadline` (`None`, our member
/// removed). Our member is removed on every way out but success, a
/// dropped future included.
///
/// # Errors
///
/// As for [`wait_until`]; our member is then removed in the background.
pub async fn enter<S: DoubleBarrierStore>(
    store: &S,
    deadline: Option<Instant>,
) -> Result<Option<Joined<S>>> {
    let mut entering = Entering { store, ours: None };
    let passed = wait_until(store, &mut entering, deadline).await?;
    match (passed, entering.ours.take()) {
        (Some(()), Some((mut undo, lost, _))) => Ok(Some(Joined {
            ticket: undo.disarm(),
            lost,
        })),
        (_, Some((mut undo, _, _))) => {
            undo.run().await;
            Ok(None)
        }
        (_, None) => Ok(None),
    }
}

/// A failure that costs a retry, not the wait: a lost connection, a
/// reply that never came.
pub(super) fn transient(e: &crate::Error) -> bool {
    e.is_retryable() || matches!(e, crate::Error::Indeterminate { .. })
}

/// A transient failure as one the wait retries (a lost reply too).
pub(super) fn retry_later(e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Indeterminate { what } => crate::Error::Backend {
            message: format!("outcome unknown: {what}"),
            retryable: true,
            source: None,
        },
        e => e,
    }
}

/// Leaving: our member removed, wait until no member created before the
/// flag is left. Creations a store's read leaves out are asked once per
/// member (kept here by name: a name is never used twice).
#[derive(Default)]
struct Leaving {
    created: HashMap<String, Option<i64>>,
}

impl Leaving {
    /// When `member` was created (`None`: gone), as read or asked.
    async fn created<S: DoubleBarrierStore>(
        &mut self,
        store: &S,
        epoch: &S::Epoch,
        member: &Member,
    ) -> Result<Option<i64>> {
        if let Some(at) = member.created {
            return Ok(Some(at));
        }
        if let Some(at) = self.created.get(&member.name) {
            return Ok(*at);
        }
        let at = store.created(epoch, &member.name).await?;
        self.created.insert(member.name.clone(), at);
        Ok(at)
    }
}

impl<S: DoubleBarrierStore> Condition<S> for Leaving {
    type Out = ();

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<(), S::Watch>> {
        let (seen, watch) = store.read(epoch).await?;
        // No flag: it was cleared with nobody in, our round gone with them.
        let Some(flag) = seen.flag else {
            return Ok(Check::Holds(()));
        };
        if seen.members.is_empty() {
            // Tidying only: a flag left over never lets a later round
            // past early.
            if let Err(e) = store.unmark(epoch, flag).await {
                log::debug!(
                    "double barrier {}: clearing the flag failed: {e}",
                    store.name()
                );
            }
            return Ok(Check::Holds(()));
        }
        for member in &seen.members {
            let created = self.created(store, epoch, member).await?;
            if created.is_some_and(|at| at < flag.set_at) {
                return Ok(Check::Wait(watch));
            }
        }
        // Only members of a later round: they may wait in enter for us.
        Ok(Check::Holds(()))
    }
}

/// Leave the double barrier: remove our member, then wait until every
/// member left (`true`) or `deadline` passes (`false`; our member is gone
/// all the same).
///
/// # Errors
///
/// As for [`wait_until`].
pub async fn leave<S: DoubleBarrierStore>(
    store: &S,
    ticket: S::Ticket,
    deadline: Option<Instant>,
) -> Result<bool> {
    // Removed from a task on the runtime: done even if this future is
    // dropped.
    Undo::new(Members(store), ticket).run().await;
    let mut leaving = Leaving::default();
    Ok(wait_until(store, &mut leaving, deadline).await?.is_some())
}
