//! The distributed semaphore front end and its permit.

use std::fmt;
use std::time::{Duration, Instant};

use crate::backend::{HeldLease, SemaphoreBackend};
use crate::error::Result;
use crate::guard::{deadline_after, lease_accessors, unbounded_wait_ended, Hold};
use crate::metrics::Labels;

/// A counting semaphore shared by processes on many machines: at most
/// [`permits`](Semaphore::permits) holders at once.
///
/// Permits are concurrent by design, so they carry no fencing token (there
/// is no total order to fence with); each permit has its own loss signal,
/// and backends offer in-store writes fenced by the permit's own entry.
///
/// # Under pause and partition
///
/// The same on every store. Guaranteed (clocks within 500 ppm): a permit's
/// loss signal fires before the store can expire the session and admit
/// another holder in its place; its fenced writes are refused once its
/// entry is gone; a timed-out, failed or abandoned acquisition leaves no
/// entry (deleted at once, or by the session's end when the store cannot
/// be reached). Not guaranteed: that a holder stops in time — one paused
/// right after checking its signal runs on after its permit was given
/// away, so N + 1 workers can overlap; only fenced writes stop it.
pub struct Semaphore<B: SemaphoreBackend> {
    backend: B,
    labels: Labels,
}

impl<B: SemaphoreBackend> Semaphore<B> {
    /// A semaphore over `backend`.
    pub fn from_backend(backend: B) -> Semaphore<B> {
        let labels = Labels::new(backend.runtime().store(), "semaphore", backend.name());
        Semaphore { backend, labels }
    }

    /// Label this semaphore's metrics with its name too (names are
    /// unbounded, so they are no label by default).
    pub fn with_name_label(mut self) -> Semaphore<B> {
        self.labels = self.labels.with_name_label();
        self
    }

    fn take(&self, deadline: Option<Instant>) -> Result<Option<SemaphorePermit<B::Permit>>> {
        let got = self.labels.timed(|| self.backend.acquire(deadline))?;
        Ok(got.map(|permit| SemaphorePermit {
            hold: Hold::counted(permit, &self.labels, false),
        }))
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// How many permits exist.
    pub fn permits(&self) -> u32 {
        self.backend.permits()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Acquire a permit, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// Backend errors; nothing is left in the store when it fails.
    pub fn acquire(&self) -> Result<SemaphorePermit<B::Permit>> {
        self.take(None)?
            .ok_or_else(|| unbounded_wait_ended("acquire"))
    }

    /// Acquire a permit only if one is free now.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Semaphore::acquire); `Ok(None)` when none is free.
    pub fn try_acquire(&self) -> Result<Option<SemaphorePermit<B::Permit>>> {
        self.try_acquire_until(Instant::now())
    }

    /// Acquire a permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Semaphore::acquire); `Ok(None)` on timeout.
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<SemaphorePermit<B::Permit>>> {
        self.take(deadline_after(timeout))
    }

    /// Acquire a permit, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`acquire`](Semaphore::acquire); `Ok(None)` on timeout.
    pub fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<SemaphorePermit<B::Permit>>> {
        self.take(Some(deadline))
    }
}

impl<B: SemaphoreBackend + fmt::Debug> fmt::Debug for Semaphore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("backend", &self.backend)
            .finish()
    }
}

/// A held permit: a lease without a shared fencing order.
#[must_use = "the permit is released when it is dropped"]
#[clippy::has_significant_drop]
pub struct SemaphorePermit<P: HeldLease> {
    hold: Hold<P>,
}

impl<P: HeldLease> SemaphorePermit<P> {
    lease_accessors!("the permit");

    /// The backend's permit, for backend-specific operations.
    pub fn lease(&self) -> &P {
        self.hold.lease()
    }

    /// Release the permit and wait until the store confirmed.
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
}

/// The backend's lease, so that what only that store has (its own fenced
/// writes, say) is a method of the guard too.
impl<P: HeldLease> std::ops::Deref for SemaphorePermit<P> {
    type Target = P;

    fn deref(&self) -> &P {
        self.lease()
    }
}

impl<P: HeldLease> fmt::Debug for SemaphorePermit<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("holder", &self.holder())
            .field("lost", &self.lost().reason())
            .finish()
    }
}
