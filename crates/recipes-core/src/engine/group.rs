//! Group membership on the wait shape ([`wait_until`]): the store's verbs
//! ([`GroupStore`]) and the loops, written once.
//!
//! A member is an entry in the store named by its id, under its client's
//! session (a ZooKeeper ephemeral node, a key on an etcd lease, a row or
//! key tied to a PostgreSQL or Redis lease), holding the member's data.
//!
//! - **join** names our member ([`GroupStore::ticket`]) and creates it;
//!   a lost reply is sent again with the same ticket (the store finds ours
//!   if it landed); a join that fails or times out removes what it may
//!   have created — only if it is ours. An id another member holds is an
//!   [`Error::InvalidArgument`](crate::Error::InvalidArgument): never a
//!   takeover.
//! - **watch** reads the group and waits for the store's notification
//!   until the view differs from the last one seen: its members, or the
//!   store's count of changes.
//! - **lost**: a joined member's signal fires when its session may be
//!   lost, and also when the store shows its entry gone while the session
//!   lives ([`GroupStore::Member`]: deleted by hand, or lost with a restore
//!   or a flush), so that no member believes it holds an id a second
//!   member could join under.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::undo::{Undo, Undoer};
use super::wait::{wait_until, Check, Condition, WaitStore};
use crate::error::Result;
use crate::held_watch::{watch_held, EntryWatcher};
use crate::loss::{LossSignal, LossTrigger};

/// One member of a group as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its id, unique in the group.
    pub id: String,
    /// The data it joined with.
    pub data: Vec<u8>,
}

/// A group as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// The members, ordered by id.
    pub members: Vec<Member>,
    /// Rises with every change of the group a reader can see, so that of
    /// two views the one with the smaller version is the older (ZooKeeper:
    /// the group node's `pzxid`; etcd: the revision of the read;
    /// Redis: a counter of the groups' changes that follows the server's
    /// clock in µs, the larger of it and the clock for an empty group;
    /// PostgreSQL: a counter of
    /// the group's changes that follows the database clock in µs, the
    /// clock itself for an empty group). `0`: the group has never had a
    /// member (on ZooKeeper: its node is absent).
    pub version: u64,
    /// How many joins and leaves the store counted since the group was
    /// created, where it counts them (ZooKeeper: the node's `cversion`);
    /// `None` on etcd, whose revision counts every write of the cluster,
    /// on Redis, whose counter every group shares, and on PostgreSQL,
    /// whose version follows the clock.
    pub changes: Option<u64>,
}

impl GroupView {
    /// Whether `id` is a member in this view.
    pub fn contains(&self, id: &str) -> bool {
        self.members.iter().any(|m| m.id == id)
    }

    /// The ids, in order.
    pub fn ids(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.id.as_str()).collect()
    }
}

/// A group's verbs.
pub trait GroupStore: WaitStore {
    /// Names our member before it exists, enough to remove it (only if it
    /// is ours) even when the create's reply is lost.
    type Ticket: Send + Sync + 'static;

    /// Our member `id` under `epoch`.
    fn ticket(&self, epoch: &Self::Epoch, id: &str) -> Self::Ticket;

    /// Create our member holding `data`: `Ok(true)` when created now,
    /// `Ok(false)` when it exists on our session already (a create whose
    /// reply was lost, or another membership of this client: the engine
    /// tells them apart).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// another member holds the id, or the name holds another recipe's
    /// layout; [`Error::Indeterminate`](crate::Error::Indeterminate) when
    /// no reply came; backend errors.
    fn join(
        &self,
        epoch: &Self::Epoch,
        ticket: &Self::Ticket,
        data: &[u8],
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Read the group; with `arm`, also a notification of its next change
    /// (armed before the read, or by it, so that no change after the read
    /// is missed).
    fn read(
        &self,
        epoch: &Self::Epoch,
        arm: bool,
    ) -> impl Future<Output = Result<(GroupView, Option<Self::Watch>)>> + Send;

    /// How our joined member's entry is watched: its deletion (or another
    /// session's member there) while our session lives is the
    /// membership's loss. Followed by core's [`watch_held`], as a held
    /// lock's entry is: the store gives one watch and its end, no loop.
    type Member: EntryWatcher + 'static;

    /// The watcher of the member `ticket` names.
    fn member(&self, ticket: &Self::Ticket) -> Self::Member;

    /// Remove the member `ticket` names if it is still ours, retrying
    /// until done or its session is gone (which removes it anyway).
    fn remove(ticket: Self::Ticket) -> impl Future<Output = ()> + Send + 'static;
}

struct Ours<'s, S>(&'s S);

impl<S> Clone for Ours<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Ours<'_, S> {}

impl<S: GroupStore> Undoer for Ours<'_, S> {
    type Ticket = S::Ticket;

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    fn undo(ticket: S::Ticket) -> impl Future<Output = ()> + Send + 'static {
        S::remove(ticket)
    }
}

/// What a joined member holds: its ticket, and its loss signal.
pub struct Joined<S: GroupStore> {
    /// Names our member.
    pub ticket: S::Ticket,
    /// Fires when our member's session may be lost (and our member with
    /// it), or when the store shows our member gone while the session
    /// lives ([`LossReason::Deleted`](crate::loss::LossReason::Deleted)).
    pub lost: LossSignal,
    /// Dropped with the membership: ends the watch of our member.
    _watching: tokio::sync::oneshot::Sender<()>,
}

impl<S: GroupStore> Joined<S> {
    /// Our member `ticket`, joined under the session whose signal is
    /// `session`: watched ([`GroupStore::Member`], core's `watch_held`)
    /// until this is dropped or the session is lost.
    fn watched(store: &S, ticket: S::Ticket, session: LossSignal) -> Joined<S> {
        let deleted = LossTrigger::root();
        let lost = LossSignal::any_of(&[session.clone(), deleted.signal()]);
        let (watching, ended) = tokio::sync::oneshot::channel::<()>();
        let member = store.member(&ticket);
        let label = format!("group {}", store.name());
        store.spawn(async move {
            tokio::select! {
                _ = ended => {}
                _ = session.fired() => {}
                _ = watch_held(&member, &label, "our member", None, &deleted) => {}
            }
        });
        Joined {
            ticket,
            lost,
            _watching: watching,
        }
    }
}

impl<S: GroupStore> std::fmt::Debug for Joined<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joined").field("lost", &self.lost).finish()
    }
}

/// Joining: our member, created under the current epoch.
struct Joining<'s, 'a, S: GroupStore> {
    store: &'s S,
    id: &'a str,
    data: &'a [u8],
    ours: Option<(Undo<Ours<'s, S>>, LossSignal)>,
    /// A create of the current ticket was sent and its outcome is unknown.
    resent: bool,
}

impl<S: GroupStore> Condition<S> for Joining<'_, '_, S> {
    type Out = ();

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<(), S::Watch>> {
        if self.ours.as_ref().is_some_and(|(_, lost)| lost.is_lost()) {
            // A member of an ended epoch went with it: a new one.
            if let Some((mut old, _)) = self.ours.take() {
                old.run().await;
            }
        }
        if self.ours.is_none() {
            self.resent = false;
        }
        let (undo, _) = self.ours.get_or_insert_with(|| {
            let undo = Undo::new(Ours(self.store), store.ticket(epoch, self.id));
            (undo, store.epoch_signal(epoch))
        });
        match store.join(epoch, undo.ticket(), self.data).await {
            Ok(true) => Ok(Check::Holds(())),
            // Ours from a create whose reply was lost.
            Ok(false) if self.resent => Ok(Check::Holds(())),
            // Another membership of this very session holds the id: not
            // ours to take over, nor to remove.
            Ok(false) => {
                if let Some((mut undo, _)) = self.ours.take() {
                    undo.disarm();
                }
                Err(crate::group::id_taken(store.name(), self.id))
            }
            // The same ticket again: the store finds ours if it landed.
            Err(e) if super::gather::transient(&e) => {
                self.resent = true;
                log::debug!("group {}: joining failed: {e}", store.name());
                Err(super::gather::retry_later(e))
            }
            Err(e) => Err(e),
        }
    }
}

/// Leave: remove our member `joined`, waiting at most `bound` for the
/// store to confirm (the removal goes on after it, until done or the
/// session is gone). Whether it was confirmed in time.
pub async fn leave<S: GroupStore>(store: &S, joined: Joined<S>, bound: Duration) -> bool {
    Undo::new(Ours(store), joined.ticket)
        .run_within(Some(bound))
        .await
}

/// Join the group as `id` with `data` until `deadline`: `None` (nothing
/// left) when it passed first. What a failed join may have created is
/// removed if it is ours, a dropped future included.
///
/// # Errors
///
/// As for [`GroupStore::join`] and [`wait_until`].
pub async fn join<S: GroupStore>(
    store: &S,
    id: &str,
    data: &[u8],
    deadline: Option<Instant>,
) -> Result<Option<Joined<S>>> {
    let mut joining = Joining {
        store,
        id,
        data,
        ours: None,
        resent: false,
    };
    let joined = wait_until(store, &mut joining, deadline).await;
    match (joined, joining.ours.take()) {
        (Ok(Some(())), Some((mut undo, lost))) => {
            Ok(Some(Joined::watched(store, undo.disarm(), lost)))
        }
        (joined, Some((mut undo, _))) => {
            undo.run().await;
            joined.map(|_| None)
        }
        (joined, None) => joined.map(|_| None),
    }
}

/// The view differs from the last one seen.
struct Changed<'a> {
    last: &'a GroupView,
}

impl<S: GroupStore> Condition<S> for Changed<'_> {
    type Out = GroupView;

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<GroupView, S::Watch>> {
        let (view, watch) = store.read(epoch, true).await?;
        if view.members != self.last.members || view.changes != self.last.changes {
            return Ok(Check::Holds(view));
        }
        match watch {
            Some(watch) => Ok(Check::Wait(watch)),
            None => Ok(Check::Restart),
        }
    }
}

/// Wait until the group differs from `last` (`Some`, the new view) or
/// `deadline` passes.
///
/// # Errors
///
/// As for [`wait_until`].
pub async fn next_view<S: GroupStore>(
    store: &S,
    last: &GroupView,
    deadline: Option<Instant>,
) -> Result<Option<GroupView>> {
    wait_until(store, &mut Changed { last }, deadline).await
}

/// Read the group once (no notification armed).
struct Read;

impl<S: GroupStore> Condition<S> for Read {
    type Out = GroupView;

    async fn check(&mut self, store: &S, epoch: &S::Epoch) -> Result<Check<GroupView, S::Watch>> {
        Ok(Check::Holds(store.read(epoch, false).await?.0))
    }
}

/// Read the group, retrying what can be retried until `deadline`.
///
/// # Errors
///
/// As for [`wait_until`]; `None` when the deadline passed first.
pub async fn view<S: GroupStore>(
    store: &S,
    deadline: Option<Instant>,
) -> Result<Option<GroupView>> {
    wait_until(store, &mut Read, deadline).await
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
