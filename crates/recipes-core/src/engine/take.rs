//! The second shape of the engine: slots that are taken, not queued for —
//! PostgreSQL's advisory locks (a mutex is one key, a semaphore N keys of
//! one name). There is no queue to read and no entry ahead to wait for:
//! a take either gets the slot now, or waits for it at the server for a
//! bounded slice (PostgreSQL's `lock_timeout`), and the engine slices the
//! caller's deadline. The loop, the restarts and the give-back on every
//! way out are written here once; a store is a [`SlotDriver`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::contend::{count_read, passed, run, starts_over, Attempt, Contest};
use super::undo::{Undo, Undoer};
use crate::backoff::Backoff;
use crate::error::Result;
use crate::loss::LossSignal;

/// A store's side of a slotted recipe: the verbs [`take`] calls —
///
/// 1. [`epoch`](SlotDriver::epoch): a live epoch (for PostgreSQL, a
///    connection of this acquisition's own);
/// 2. for a slot, a [`ticket`](SlotDriver::ticket) that names it, enough
///    to [`give_back`](SlotDriver::give_back) what a take may have got;
/// 3. [`take`](SlotDriver::take) it, waiting at most a slice;
/// 4. [`confirm`](SlotDriver::confirm) the holding and mint the fence, then
///    [`won`](SlotDriver::won).
///
/// Every way out but a win gives the slot back, from a task on the
/// runtime, waited for unless the acquisition's future was dropped — even
/// while a take is in flight, which may be granted after the drop: the
/// give-back must then undo it (on PostgreSQL it is sent on the same
/// connection after the take, so the server runs it after the take).
/// Drivers never loop and never look at the deadline.
pub trait SlotDriver: Send + Sync + Sized {
    /// What the slots are taken under; once its
    /// [`epoch_signal`](SlotDriver::epoch_signal) fires, the engine gives
    /// back what it took and starts over under a new epoch.
    type Epoch: Send + Sync;
    /// Names one slot under one epoch.
    type Ticket: Send + 'static;
    /// What a win hands over: the held lease's parts.
    type Won: Send;

    /// How many slots there are: 1 for a mutex, N for a semaphore.
    fn slots(&self) -> usize;

    /// The longest one take may wait at the server.
    fn slice(&self) -> Duration;

    /// Run `task` on the client's runtime, without blocking.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// How long a stuck request may run past the acquisition's deadline.
    fn rpc_timeout(&self) -> Duration;

    /// A live epoch; `Ok(None)` when `deadline` passed first.
    fn epoch(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<Self::Epoch>>> + Send;

    /// Fires when the epoch is lost.
    fn epoch_signal(&self, epoch: &Self::Epoch) -> LossSignal;

    /// The ticket of slot `slot` (in `0..slots()`) under `epoch`.
    fn ticket(&self, epoch: &Self::Epoch, slot: usize) -> Self::Ticket;

    /// Take the slot, waiting for it at most `within` (zero: only if it is
    /// free now). `Ok(false)`: not taken, and nothing to give back.
    fn take(
        &self,
        epoch: &Self::Epoch,
        ticket: &mut Self::Ticket,
        within: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The slot is ours: mint the fence. `None` when the holding turned
    /// out to be gone (the engine gives it back and starts over). Dropped
    /// when the epoch is lost before it answers: a holding on a lost epoch
    /// is never handed over.
    fn confirm(
        &self,
        epoch: &Self::Epoch,
        ticket: &mut Self::Ticket,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Give back whatever a take of `ticket` may have got, until done or
    /// the epoch is gone (which gives it back anyway).
    fn give_back(ticket: Self::Ticket) -> impl Future<Output = ()> + Send + 'static;

    /// The win, with its fence.
    fn won(&self, epoch: Self::Epoch, ticket: Self::Ticket, fence: i64) -> Self::Won;
}

/// Take a slot until one is ours (`Some`) or `deadline` passes (`None`).
///
/// Each round tries every slot without waiting, then waits for one of them
/// (in turn) at the server for at most [`slice`](SlotDriver::slice) or
/// what is left before the deadline, so no server call outlives the
/// deadline by more than a round trip. The first round always runs, so a
/// try-lock of a free slot succeeds. After an epoch loss, or a failed
/// take within the deadline, the engine gives back what it took and starts
/// over under a new epoch.
///
/// Not fair: a waiter whose slice ends loses its place in the server's
/// queue to whoever asks in between.
///
/// # Errors
///
/// Whatever the driver returns that cannot be retried, or a retryable one
/// once the deadline has passed; the give-back then runs in the background.
pub fn take<D: SlotDriver>(
    driver: &D,
    deadline: Option<Instant>,
) -> impl Future<Output = Result<Option<D::Won>>> + Send + '_ {
    run(Slots(driver), deadline)
}

/// A [`SlotDriver`] as the shared loop's [`Contest`], and as the
/// [`Undoer`] that gives a slot back.
struct Slots<'d, D>(&'d D);

impl<D> Clone for Slots<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Slots<'_, D> {}

impl<D: SlotDriver> Undoer for Slots<'_, D> {
    type Ticket = D::Ticket;

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }

    fn undo(ticket: D::Ticket) -> impl Future<Output = ()> + Send + 'static {
        D::give_back(ticket)
    }
}

impl<D: SlotDriver> Contest for Slots<'_, D> {
    type Epoch = D::Epoch;
    type Won = D::Won;

    fn rpc_timeout(&self) -> Duration {
        self.0.rpc_timeout()
    }

    fn epoch(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Option<D::Epoch>>> + Send {
        self.0.epoch(deadline)
    }

    fn attempt(
        &self,
        epoch: D::Epoch,
        deadline: Option<Instant>,
        _backoff: &mut Backoff,
    ) -> impl Future<Output = Result<Attempt<D::Won>>> + Send {
        attempt(self.0, epoch, deadline)
    }
}

/// What one take of one slot came to.
enum Took<W> {
    Won(W),
    NotFree,
    Restart,
}

async fn attempt<D: SlotDriver>(
    driver: &D,
    epoch: D::Epoch,
    deadline: Option<Instant>,
) -> Result<Attempt<D::Won>> {
    let lost = driver.epoch_signal(&epoch);
    let slots = driver.slots().max(1);
    let mut turn = 0;
    // The first round only tries; later rounds wait a slice on one slot.
    let mut first = true;
    let mut epoch = Some(epoch);
    loop {
        for slot in 0..slots {
            let e = epoch.as_ref().expect("the epoch is kept until a win");
            if lost.is_lost() {
                return Ok(Attempt::Restart);
            }
            let within = match (first, slot == turn % slots) {
                (false, true) => left(deadline).min(driver.slice()),
                _ => Duration::ZERO,
            };
            match take_one(driver, e, slot, within, &lost, deadline).await? {
                Took::Won(mut g) => {
                    let (ticket, fence) = (g.disarm_won(), g.fence);
                    let e = epoch.take().expect("the epoch is kept until a win");
                    return Ok(Attempt::Won(driver.won(e, ticket, fence)));
                }
                Took::NotFree => {}
                Took::Restart => return Ok(Attempt::Restart),
            }
        }
        if passed(deadline) {
            return Ok(Attempt::TimedOut);
        }
        if !first {
            turn += 1;
        }
        first = false;
    }
}

/// A won slot, still armed to be given back until handed to `won`.
struct Granted<'d, D: SlotDriver> {
    give_back: Undo<Slots<'d, D>>,
    fence: i64,
}

impl<D: SlotDriver> Granted<'_, D> {
    fn disarm_won(&mut self) -> D::Ticket {
        self.give_back.disarm()
    }
}

async fn take_one<'d, D: SlotDriver>(
    driver: &'d D,
    epoch: &D::Epoch,
    slot: usize,
    within: Duration,
    lost: &LossSignal,
    deadline: Option<Instant>,
) -> Result<Took<Granted<'d, D>>> {
    let mut give_back = Undo::new(Slots(driver), driver.ticket(epoch, slot));
    let taken = tokio::select! {
        biased;
        taken = driver.take(epoch, give_back.ticket(), within) => taken,
        _ = lost.fired() => {
            give_back.run().await;
            return Ok(Took::Restart);
        }
    };
    let confirmed = match taken {
        Ok(false) => {
            // Nothing was taken: nothing to give back.
            give_back.disarm();
            return Ok(Took::NotFree);
        }
        Ok(true) => {
            if !within.is_zero() {
                count_read();
            }
            // A confirm may wait out a previous holder's deadline, which
            // can be longer than our epoch lives: an epoch lost meanwhile
            // ends it (its holding would be lost when handed over).
            tokio::select! {
                biased;
                _ = lost.fired() => {
                    log::debug!("take: slot {slot}: the epoch was lost while confirming");
                    give_back.run().await;
                    return Ok(Took::Restart);
                }
                confirmed = driver.confirm(epoch, give_back.ticket()) => confirmed,
            }
        }
        Err(e) => Err(e),
    };
    match confirmed {
        Ok(Some(fence)) => Ok(Took::Won(Granted { give_back, fence })),
        Ok(None) => {
            log::debug!("take: slot {slot} is not ours after all; starting over");
            give_back.run().await;
            Ok(Took::Restart)
        }
        Err(e) if starts_over(&e, lost.is_lost(), deadline) => {
            log::debug!("take: slot {slot}: {e}; starting over");
            give_back.run().await;
            Ok(Took::Restart)
        }
        // Dropping `give_back` hands it to the runtime.
        Err(e) => Err(e),
    }
}

/// What is left before `deadline` (forever without one).
fn left(deadline: Option<Instant>) -> Duration {
    deadline.map_or(Duration::MAX, |d| {
        d.saturating_duration_since(Instant::now())
    })
}

#[cfg(test)]
#[path = "take_tests.rs"]
mod tests;
