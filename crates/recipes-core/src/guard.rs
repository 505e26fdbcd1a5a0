//! What every guard shares: the held lease, its loss signal, release on
//! drop without blocking.

use std::time::{Duration, Instant};

use crate::backend::{HeldLease, Releasing};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal};
use crate::metrics::Labels;
use crate::runtime::Boxed;

/// The held lease inside a guard; gone only after release.
#[derive(Debug)]
pub(crate) struct Hold<L: HeldLease> {
    lease: Option<L>,
    signal: LossSignal,
    // The recipe's metrics, and when the holding began.
    metrics: Option<(Labels, Instant)>,
}

impl<L: HeldLease> Hold<L> {
    pub(crate) fn new(lease: L) -> Hold<L> {
        let signal = lease.loss_signal().clone();
        Hold {
            lease: Some(lease),
            signal,
            metrics: None,
        }
    }

    /// Hold `lease`, counting it in the recipe's metrics: its loss, its
    /// hold time, and for a `leadership` the leader gauge.
    pub(crate) fn counted(lease: L, labels: &Labels, leadership: bool) -> Hold<L> {
        let mut hold = Hold::new(lease);
        labels.holding(&hold.signal, leadership);
        hold.metrics = Some((labels.clone(), Instant::now()));
        hold
    }

    fn ended(&mut self) {
        if let Some((labels, since)) = self.metrics.take() {
            labels.held(since);
        }
    }

    pub(crate) fn lease(&self) -> &L {
        self.lease
            .as_ref()
            .expect("a guard's lease is present until the guard is released or dropped")
    }

    /// The lease, out of the guard without releasing it (a downgrade
    /// hands it back to the backend); the holding ends in the metrics.
    pub(crate) fn into_lease(mut self) -> L {
        self.ended();
        self.lease
            .take()
            .expect("a guard's lease is present until the guard is released or dropped")
    }

    pub(crate) fn lost(&self) -> &LossSignal {
        &self.signal
    }

    pub(crate) fn check(&self) -> Result<()> {
        match self.signal.reason() {
            Some(reason) => Err(Error::LeaseLost { reason }),
            None => Ok(()),
        }
    }

    pub(crate) fn valid_until(&self) -> Option<BootInstant> {
        self.signal.valid_until()
    }

    /// Give the lease up. `Ok(())` only when the store confirmed;
    /// [`Error::LeaseLost`] when the lease was already gone before the call
    /// (another holder may have run meanwhile: the work done under it was
    /// not protected to the end); [`Error::Indeterminate`] when the store
    /// did not confirm in time (the backend goes on removing the entry in
    /// the background while the session lives).
    pub(crate) fn release(mut self) -> Result<()> {
        self.ended();
        let lost_before = self.signal.reason();
        let released = match self.lease.take() {
            Some(l) => l.release(),
            None => Ok(()),
        };
        outcome(lost_before, released)
    }
}

/// A release's outcome: the loss that came before it, else the store's
/// answer (an error of it unconfirmed).
fn outcome(lost_before: Option<LossReason>, released: Result<()>) -> Result<()> {
    match lost_before {
        Some(reason) => Err(Error::LeaseLost { reason }),
        None => released.map_err(Error::unconfirmed),
    }
}

impl<L: HeldLease> Hold<L> {
    /// [`release`](Hold::release) as a future for the client's runtime
    /// (see [`HeldLease::release_later`]), with the same outcome; `Err`
    /// (the hold untouched) when the lease has none.
    pub(crate) fn release_later(mut self) -> std::result::Result<Releasing, Hold<L>> {
        let Some(lease) = self.lease.take() else {
            return Err(self);
        };
        let lost_before = self.signal.reason();
        match lease.release_later() {
            Err(lease) => {
                self.lease = Some(lease);
                Err(self)
            }
            Ok(Releasing { runtime, future }) => {
                self.ended();
                let future: Boxed<()> = Box::pin(async move { outcome(lost_before, future.await) });
                Ok(Releasing { runtime, future })
            }
        }
    }

    /// [`release_later`](Hold::release_later), with `kept` dropped only
    /// once the release is done; both handed back untouched when the lease
    /// has no such future.
    pub(crate) fn release_later_keeping<K: Send + 'static>(
        self,
        kept: K,
    ) -> std::result::Result<Releasing, (Hold<L>, K)> {
        match self.release_later() {
            Ok(releasing) => Ok(releasing.keeping(kept)),
            Err(hold) => Err((hold, kept)),
        }
    }
}

impl<L: HeldLease> Drop for Hold<L> {
    fn drop(&mut self) {
        if let Some(l) = self.lease.take() {
            self.ended();
            l.release_in_background();
        }
    }
}

/// The deadline `d` from now; `None` (wait forever) if it does not fit.
pub(crate) fn deadline_after(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}

/// A backend answered an unbounded acquisition with "timed out".
pub(crate) fn unbounded_wait_ended(what: &str) -> Error {
    Error::Backend {
        message: format!("{what} without a deadline returned without acquiring"),
        retryable: true,
        source: None,
    }
}

/// The accessors every guard type shares, over its `hold: Hold<L>` field.
macro_rules! lease_accessors {
    ($what:literal) => {
        #[doc = concat!("Fires when ", $what, " may be gone: stop work that relies on it.")]
        pub fn lost(&self) -> &$crate::loss::LossSignal {
            self.hold.lost()
        }

        #[doc = concat!("Whether ", $what, " may be gone (reads the clock itself).")]
        pub fn is_lost(&self) -> bool {
            self.hold.lost().is_lost()
        }

        /// `Ok(())` while the lease is valid.
        ///
        /// # Errors
        ///
        /// [`Error::LeaseLost`](crate::Error::LeaseLost) with the reason.
        pub fn check(&self) -> $crate::error::Result<()> {
            self.hold.check()
        }

        #[doc = concat!(
                    "Until when ", $what, " may be assumed held, on the boot-time clock: a ",
                    "conservative local estimate, earlier than the server's own expiry, or the ",
                    "moment the loss signal fired."
                )]
        pub fn valid_until(&self) -> Option<$crate::clock::BootInstant> {
            self.hold.valid_until()
        }

        #[doc = concat!("Where ", $what, " lives in the store (node path or key).")]
        pub fn holder(&self) -> &str {
            $crate::backend::HeldLease::holder(self.hold.lease())
        }
    };
}
pub(crate) use lease_accessors;
