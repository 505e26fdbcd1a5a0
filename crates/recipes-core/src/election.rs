//! The leader election front end and its leadership guard.

use std::fmt;
use std::time::{Duration, Instant};

use crate::backend::{ElectionBackend, LeaderInfo, LeadershipLease};
use crate::error::Result;
use crate::fence::FencingToken;
use crate::guard::{deadline_after, lease_accessors, unbounded_wait_ended, Hold};

/// A leader election: campaign, publish a value while leader, resign.
pub struct Election<B: ElectionBackend> {
    backend: B,
}

impl<B: ElectionBackend> Election<B> {
    /// An election over `backend`.
    pub fn from_backend(backend: B) -> Election<B> {
        Election { backend }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Campaign with `value` until elected.
    ///
    /// # Errors
    ///
    /// Backend errors; nothing is left in the store when it fails.
    pub fn campaign(&self, value: &[u8]) -> Result<Leadership<B::Leadership>> {
        self.backend
            .campaign(value, None)?
            .map(Leadership::new)
            .ok_or_else(|| unbounded_wait_ended("campaign"))
    }

    /// Become leader only if nobody leads now.
    ///
    /// # Errors
    ///
    /// As for [`campaign`](Election::campaign); `Ok(None)` if another leads.
    pub fn try_campaign(&self, value: &[u8]) -> Result<Option<Leadership<B::Leadership>>> {
        self.try_campaign_until(value, Instant::now())
    }

    /// Campaign for at most `timeout`.
    ///
    /// # Errors
    ///
    /// As for [`campaign`](Election::campaign); `Ok(None)` on timeout.
    pub fn try_campaign_for(
        &self,
        value: &[u8],
        timeout: Duration,
    ) -> Result<Option<Leadership<B::Leadership>>> {
        Ok(self
            .backend
            .campaign(value, deadline_after(timeout))?
            .map(Leadership::new))
    }

    /// Campaign until `deadline`.
    ///
    /// # Errors
    ///
    /// As for [`campaign`](Election::campaign); `Ok(None)` on timeout.
    pub fn try_campaign_until(
        &self,
        value: &[u8],
        deadline: Instant,
    ) -> Result<Option<Leadership<B::Leadership>>> {
        Ok(self
            .backend
            .campaign(value, Some(deadline))?
            .map(Leadership::new))
    }

    /// The current leader, if any.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn leader(&self) -> Result<Option<LeaderInfo>> {
        self.backend.leader()
    }
}

impl<B: ElectionBackend + fmt::Debug> fmt::Debug for Election<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("backend", &self.backend)
            .finish()
    }
}

/// Held leadership: a lease with a fencing token. Dropping it resigns in the
/// background.
#[must_use = "leadership is resigned when the guard is dropped"]
#[clippy::has_significant_drop]
pub struct Leadership<L: LeadershipLease> {
    hold: Hold<L>,
    token: FencingToken,
}

impl<L: LeadershipLease> Leadership<L> {
    lease_accessors!("leadership");

    fn new(lease: L) -> Leadership<L> {
        let token = lease.token();
        Leadership {
            hold: Hold::new(lease),
            token,
        }
    }

    /// The fencing token of this term.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Publish a new value while leader.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if leadership is gone;
    /// backend errors.
    pub fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.hold.check()?;
        self.hold.lease().proclaim(value)
    }

    /// The backend's lease, for backend-specific operations.
    pub fn lease(&self) -> &L {
        self.hold.lease()
    }

    /// Resign and wait until the store confirmed.
    ///
    /// # Errors
    ///
    /// A backend error if the store could not be reached.
    pub fn resign(self) -> Result<()> {
        self.hold.release()
    }
}

impl<L: LeadershipLease> fmt::Debug for Leadership<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("holder", &self.holder())
            .field("token", &self.token)
            .field("lost", &self.lost().reason())
            .finish()
    }
}
