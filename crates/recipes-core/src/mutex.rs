//! The distributed mutex front end and its guard.

use std::fmt;
use std::time::{Duration, Instant};

use crate::backend::{FencedLease, MutexBackend, Releasing};
use crate::error::Result;
use crate::fence::FencingToken;
use crate::guard::{deadline_after, lease_accessors, unbounded_wait_ended, Hold};
use crate::metrics::Labels;

/// A mutex shared by processes on many machines.
///
/// Holding it is a **lease**: it can be lost while the holder still runs (a
/// long pause, a partition). The guard's [`token`](MutexGuard::token) lets
/// the protected resource refuse a stale holder, and its
/// [`lost`](MutexGuard::lost) signal says when to stop. Not reentrant: a
/// second `lock` from the same process waits like any other contender.
///
/// Generic over a [`MutexBackend`]; backends export it under their own name
/// (`recipes_zk::InterProcessMutex`, `recipes_etcd::Mutex`) with their
/// layout on the store.
///
/// # Under pause and partition
///
/// The same on every store. Guaranteed, with clocks running within 500 ppm
/// of the server's: a guard's loss signal fires before the store can expire
/// the session (ZooKeeper) or lease (etcd) and let another contender in —
/// at the local deadline, when the store says the session is gone, or when
/// our entry is deleted; fencing tokens strictly increase across holders;
/// fenced writes in the store are refused once our entry is gone. Not
/// guaranteed: that the holder notices in time — a pause right after
/// checking the signal outlives the lease, and only the fence stops the
/// stale holder's writes. A partitioned holder loses the guard at its local
/// deadline even if the store still keeps its session.
pub struct Mutex<B: MutexBackend> {
    backend: B,
    labels: Labels,
}

impl<B: MutexBackend> Mutex<B> {
    /// A mutex over `backend`.
    pub fn from_backend(backend: B) -> Mutex<B> {
        let labels = Labels::new(backend.runtime().store(), "mutex", backend.name());
        Mutex { backend, labels }
    }

    /// Label this mutex's metrics with its name too (names are unbounded,
    /// so they are no label by default).
    pub fn with_name_label(mut self) -> Mutex<B> {
        self.labels = self.labels.with_name_label();
        self
    }

    pub(crate) fn acquire(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<MutexGuard<B::Lease>>> {
        let got = self.labels.timed(|| self.backend.acquire(deadline))?;
        Ok(got.map(|lease| MutexGuard::counted(lease, &self.labels)))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Acquire, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// Backend errors (connection, session expiry, closed client). Nothing is
    /// left in the store when it fails.
    pub fn lock(&self) -> Result<MutexGuard<B::Lease>> {
        self.acquire(None)?
            .ok_or_else(|| unbounded_wait_ended("lock"))
    }

    /// Acquire only if the lock is free now.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Mutex::lock); `Ok(None)` when the lock is held.
    pub fn try_lock(&self) -> Result<Option<MutexGuard<B::Lease>>> {
        self.try_lock_until(Instant::now())
    }

    /// Acquire, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Mutex::lock); `Ok(None)` when `timeout` passed first.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MutexGuard<B::Lease>>> {
        self.acquire(deadline_after(timeout))
    }

    /// Acquire, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Mutex::lock); `Ok(None)` when `deadline` passed first.
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<MutexGuard<B::Lease>>> {
        self.acquire(Some(deadline))
    }
}

impl<B: MutexBackend + fmt::Debug> fmt::Debug for Mutex<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("backend", &self.backend)
            .finish()
    }
}

/// A held distributed lock: a lease with a fencing token.
///
/// Dropping it releases the lock in the background (never blocking);
/// [`release`](MutexGuard::release) releases and reports the outcome.
#[must_use = "the lock is released when the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MutexGuard<L: FencedLease> {
    hold: Hold<L>,
    token: FencingToken,
}

impl<L: FencedLease> MutexGuard<L> {
    lease_accessors!("the lock");

    /// A guard over a lease a backend acquired by other means (a leader
    /// selector's term, say). The guard releases it when dropped.
    pub fn from_lease(lease: L) -> MutexGuard<L> {
        MutexGuard::over(Hold::new(lease))
    }

    /// A guard counted in the metrics of `labels`.
    pub(crate) fn counted(lease: L, labels: &Labels) -> MutexGuard<L> {
        MutexGuard::over(Hold::counted(lease, labels, false))
    }

    fn over(hold: Hold<L>) -> MutexGuard<L> {
        let token = hold.lease().token();
        MutexGuard { hold, token }
    }

    /// The fencing token: pass it with every write to the protected
    /// resource, which must refuse tokens lower than the highest it saw.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The backend's lease, for backend-specific operations such as fenced
    /// writes in the store.
    pub fn lease(&self) -> &L {
        self.hold.lease()
    }

    /// Release the lock and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// - [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease was
    ///   already gone before the call: another holder may have run while
    ///   this one still worked;
    /// - [`Error::Indeterminate`](crate::Error::Indeterminate) when the store
    ///   did not confirm within the RPC timeout: the removal goes on in the
    ///   background while the session lives, and the session's end removes
    ///   the entry in any case;
    /// - other backend errors.
    pub fn release(self) -> Result<()> {
        self.hold.release()
    }

    /// [`release`](MutexGuard::release) as a future for the client's
    /// runtime (see [`HeldLease::release_later`](crate::store::HeldLease::release_later));
    /// `Err` (the guard untouched) when its lease has none.
    pub(crate) fn release_later(self) -> std::result::Result<Releasing, Self> {
        let MutexGuard { hold, token } = self;
        hold.release_later()
            .map_err(|hold| MutexGuard { hold, token })
    }
}

/// The backend's lease, so that what only that store has (its own fenced
/// writes, say) is a method of the guard too.
impl<L: FencedLease> std::ops::Deref for MutexGuard<L> {
    type Target = L;

    fn deref(&self) -> &L {
        self.lease()
    }
}

impl<L: FencedLease> fmt::Debug for MutexGuard<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("holder", &self.holder())
            .field("token", &self.token)
            .field("lost", &self.lost().reason())
            .finish()
    }
}
