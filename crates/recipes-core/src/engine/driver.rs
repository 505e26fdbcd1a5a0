//! What a store supplies to the contend engine: a few async verbs over its
//! session, its entries and its watches. Nothing here decides; the engine
//! ([`contend`](super::contend)) does, once for every store.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::decide::{Role, Rule};
use crate::error::Result;
use crate::loss::LossSignal;

/// A read of the queue: the contenders in the store's order, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<Id> {
    /// The queue, ours included; or a window of it ending at ours that
    /// holds every entry the driver's [`Rule`] looks at (see
    /// [`Rule::decide`]). Only entries of this recipe's exact layout count.
    pub contenders: Vec<Id>,
    /// The store's revision of this read, where it has one (etcd's header
    /// revision), else 0. A driver may fence with it in
    /// [`confirm`](ContendDriver::confirm).
    pub revision: i64,
}

/// What [`enter`](ContendDriver::enter) returns: our entry, and the queue
/// if the same round trip read it.
pub type Entered<D> = (
    <D as ContendDriver>::Entry,
    Option<Listing<<D as ContendDriver>::Id>>,
);

/// A store's side of one contended recipe, as Curator's
/// `LockInternalsDriver` is: the verbs the engine calls in this order —
///
/// 1. [`epoch`](ContendDriver::epoch): a live session epoch (waits for a
///    session; `None` when the deadline passed first);
/// 2. [`ticket`](ContendDriver::ticket): what names our entry before it
///    exists, enough to [`remove`](ContendDriver::remove) it even if the
///    create's reply is lost;
/// 3. [`enter`](ContendDriver::enter): create our entry (and, where the
///    store does both in one round trip, read the queue);
/// 4. [`list`](ContendDriver::list) the queue, and, while the recipe's
///    [`rule`](ContendDriver::rule) says ours does not hold,
///    [`wait`](ContendDriver::wait) for the one entry it names;
/// 5. [`confirm`](ContendDriver::confirm) the win and mint the fence, then
///    [`won`](ContendDriver::won) hands everything to the held lease.
///
/// Every way out but a win removes our entry: the engine runs
/// [`remove`](ContendDriver::remove) in a task on the runtime
/// ([`spawn`](ContendDriver::spawn)), and waits for it unless the
/// acquisition's future was dropped.
/// Drivers never loop over the queue, never back off and never
/// look at the acquisition's deadline: the engine does.
pub trait ContendDriver: Send + Sync + Sized {
    /// A session epoch our entry lives under; once its
    /// [`epoch_signal`](ContendDriver::epoch_signal) fires, the engine
    /// removes our entry and starts over under a new epoch.
    type Epoch: Send + Sync;
    /// Names our entry for removal; owned by the engine until the win.
    type Ticket: Send + 'static;
    /// Our entry as created, with whatever the driver keeps while waiting
    /// (watches, say).
    type Entry: Send;
    /// A contender as the queue shows it.
    type Id: PartialEq + Clone + Send + Sync + fmt::Debug;
    /// What a win hands over: the held lease's parts.
    type Won: Send;

    /// The recipe's queue rule: who among the listed contenders holds.
    fn rule(&self) -> Rule;

    /// A listed contender's role, as its entry's layout names it. The
    /// default is the one role the rule's recipe has; a driver whose queue
    /// mixes roles (a read-write lock's) says which each entry is.
    fn role(&self, id: &Self::Id) -> Role {
        let _ = id;
        match self.rule() {
            Rule::Mutex => Role::Mutex,
            Rule::Latch => Role::Participant,
            Rule::Leases(_) => Role::Permit,
            Rule::ReadWrite => Role::Writer,
        }
    }

    /// Run `task` on the client's runtime, without blocking: removals run
    /// there so that they finish even if the acquisition's future is
    /// dropped half-way.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// How long a stuck request may run past the acquisition's deadline
    /// before the attempt is cut off (and its entry removed).
    fn rpc_timeout(&self) -> Duration;

    /// A live epoch, waiting for the session if need be; `Ok(None)` when
    /// `deadline` passed first.
    fn epoch(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<Self::Epoch>>> + Send;

    /// Fires when the epoch is lost.
    fn epoch_signal(&self, epoch: &Self::Epoch) -> LossSignal;

    /// A fresh name for our entry under `epoch`.
    fn ticket(&self, epoch: &Self::Epoch) -> Self::Ticket;

    /// Create our entry. May update the ticket (what the create told us).
    /// Returns the entry and, if the same round trip read the queue, that
    /// listing.
    fn enter(
        &self,
        epoch: &Self::Epoch,
        ticket: &mut Self::Ticket,
    ) -> impl Future<Output = Result<Entered<Self>>> + Send;

    /// Our entry's id as the queue shows it.
    fn ours<'e>(&self, entry: &'e Self::Entry) -> &'e Self::Id;

    /// Read the queue.
    fn list(
        &self,
        epoch: &Self::Epoch,
        entry: &mut Self::Entry,
    ) -> impl Future<Output = Result<Listing<Self::Id>>> + Send;

    /// Resolve when `ahead` may be gone (or anything else that calls for a
    /// new read, such as a watch that was just set); under
    /// [`Rule::Leases`] with more than one holder, also when any entry
    /// ahead of ours may be gone. The engine drops this future only when
    /// it gives up the attempt.
    fn wait(
        &self,
        epoch: &Self::Epoch,
        entry: &mut Self::Entry,
        ahead: &Self::Id,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Ours holds per `listing`: confirm it and mint the fence. `None` when
    /// our entry turned out to be gone (the engine starts over).
    fn confirm(
        &self,
        epoch: &Self::Epoch,
        entry: &mut Self::Entry,
        listing: &Listing<Self::Id>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Remove the entry `ticket` names, retrying until done or the session
    /// is gone (which removes it anyway).
    fn remove(ticket: Self::Ticket) -> impl Future<Output = ()> + Send + 'static;

    /// The win, with its fence.
    fn won(
        &self,
        epoch: Self::Epoch,
        ticket: Self::Ticket,
        entry: Self::Entry,
        fence: i64,
    ) -> Self::Won;
}
