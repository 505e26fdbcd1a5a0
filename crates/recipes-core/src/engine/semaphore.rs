//! The semaphore, composed once: Curator's `InterProcessSemaphoreV2`
//! structure over any store — a stored size, an internal mutex that lets
//! one waiter at a time in, and permit entries of which the first N hold.

use std::future::Future;

use tokio::time::Instant;

use super::contend::contend;
use super::driver::ContendDriver;
use super::undo::{Undo, Undoer};
use crate::error::Result;

/// A store's side of a semaphore: two contend drivers and the stored size.
///
/// The permit driver's `max_leases` is the semaphore's size N. Its
/// entries are created only while the internal mutex is held, so at most
/// one waiter's entry exists; the first N entries in the queue hold. At
/// most N permits are held even if the internal mutex is broken (its entry
/// deleted by hand): each holder had fewer than N entries ahead of it when
/// admitted, and entries are never re-created.
pub trait SemaphoreDriver: Send + Sync {
    /// The internal mutex (`max_leases` 1).
    type Lock: ContendDriver;
    /// The permit entries (`max_leases` N).
    type Permit: ContendDriver;

    /// Store our size if none is stored; refuse with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if another
    /// size is.
    fn ensure_size(&self) -> impl Future<Output = Result<()>> + Send;

    /// The internal mutex's driver.
    fn lock(&self) -> &Self::Lock;

    /// The permits' driver.
    fn permits(&self) -> &Self::Permit;

    /// Give the internal mutex back, retrying until the store confirmed or
    /// the session is gone.
    fn unlock(
        held: <Self::Lock as ContendDriver>::Won,
    ) -> impl Future<Output = ()> + Send + 'static;
}

/// A win of a semaphore's internal mutex: how the store gives it back.
pub trait Unlock: Send + 'static {
    /// Remove the internal mutex's entry, retrying until the store
    /// confirmed or the session is gone.
    fn unlock(self) -> impl Future<Output = ()> + Send + 'static;
}

/// A store's check of a semaphore's stored size, run before each
/// admission (`()`: none, the size was checked when the handle was made).
pub trait SizeCheck: Send + Sync {
    /// As [`SemaphoreDriver::ensure_size`].
    fn ensure_size(&self) -> impl Future<Output = Result<()>> + Send;
}

impl SizeCheck for () {
    async fn ensure_size(&self) -> Result<()> {
        Ok(())
    }
}

impl<T: SizeCheck> SizeCheck for &T {
    fn ensure_size(&self) -> impl Future<Output = Result<()>> + Send {
        (**self).ensure_size()
    }
}

/// The one [`SemaphoreDriver`] of every store: its internal mutex's and
/// its permits' contend drivers over the store's layout, and its size
/// check.
#[derive(Debug)]
pub struct Admission<L, P, S = ()> {
    /// The internal mutex's driver (`Rule::Mutex`).
    pub lock: L,
    /// The permits' driver (`Rule::Leases(N)`).
    pub permits: P,
    /// The size check.
    pub size: S,
}

impl<L, P, S> SemaphoreDriver for Admission<L, P, S>
where
    L: ContendDriver<Won: Unlock>,
    P: ContendDriver,
    S: SizeCheck,
{
    type Lock = L;
    type Permit = P;

    fn ensure_size(&self) -> impl Future<Output = Result<()>> + Send {
        self.size.ensure_size()
    }

    fn lock(&self) -> &L {
        &self.lock
    }

    fn permits(&self) -> &P {
        &self.permits
    }

    fn unlock(held: L::Won) -> impl Future<Output = ()> + Send + 'static {
        held.unlock()
    }
}

/// The internal mutex's give-back, as an [`Undo`]: however the admission
/// ends, its future being dropped included (then from a task).
struct GiveBack<'s, S>(&'s S);

impl<S: SemaphoreDriver> Undoer for GiveBack<'_, S>
where
    <S::Lock as ContendDriver>::Won: 'static,
{
    type Ticket = <S::Lock as ContendDriver>::Won;

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.lock().spawn(task);
    }

    fn undo(held: Self::Ticket) -> impl Future<Output = ()> + Send + 'static {
        S::unlock(held)
    }
}

/// Acquire one permit, waiting until `deadline`: check the size, hold the
/// internal mutex, contend among the permits, give the mutex back however
/// that ended.
///
/// # Errors
///
/// A size that differs from the stored one; the drivers' errors. Nothing is
/// left in the store when it fails.
pub async fn admit<S: SemaphoreDriver>(
    semaphore: &S,
    deadline: Option<Instant>,
) -> Result<Option<<S::Permit as ContendDriver>::Won>>
where
    <S::Lock as ContendDriver>::Won: 'static,
{
    semaphore.ensure_size().await?;
    let Some(lock) = contend(semaphore.lock(), deadline).await? else {
        return Ok(None);
    };
    let mut give_back = Undo::new(GiveBack(semaphore), lock);
    let admitted = contend(semaphore.permits(), deadline).await;
    // At most the RPC timeout: a store that does not answer must not hold
    // the caller past its deadline by more (the give-back goes on); waited
    // for at all so that the next admission rarely finds our entry there.
    let bound = semaphore.lock().rpc_timeout();
    give_back.run_within(Some(bound)).await;
    admitted
}
