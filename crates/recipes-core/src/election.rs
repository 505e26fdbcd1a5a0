//! The leader election front end and its leadership guard.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use tokio::sync::oneshot;

use crate::backend::{ElectionBackend, LeaderInfo, LeadershipLease};
use crate::error::Result;
use crate::fence::FencingToken;
use crate::guard::{deadline_after, lease_accessors, unbounded_wait_ended, Hold};
use crate::metrics::Labels;

/// A leader election: campaign, publish a value while leader, resign.
///
/// The timed variants return `Ok(None)` when the deadline passes and leave
/// no entry behind.
///
/// # Under pause and partition
///
/// The same on every store. Guaranteed (clocks within 500 ppm): a
/// [`Leadership`]'s loss signal fires before the store can expire the
/// session and let another candidate win; fencing tokens strictly increase
/// across terms; proclaims and fenced writes are refused once our entry is
/// gone. Not guaranteed: that a leader stops in time — a process paused
/// right after checking its signal runs on after another was elected; only
/// the fence stops its writes. An observer reports what the store said,
/// late by as long as it was cut off: no proof of leadership.
pub struct Election<B: ElectionBackend> {
    backend: B,
    labels: Labels,
}

impl<B: ElectionBackend> Election<B> {
    /// An election over `backend`.
    pub fn from_backend(backend: B) -> Election<B> {
        let labels = Labels::new(backend.runtime().store(), "election", backend.name());
        Election { backend, labels }
    }

    /// Label this election's metrics with its name too (names are
    /// unbounded, so they are no label by default).
    pub fn with_name_label(mut self) -> Election<B> {
        self.labels = self.labels.with_name_label();
        self
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
        self.campaign_until(value, None)?
            .ok_or_else(|| unbounded_wait_ended("campaign"))
    }

    fn campaign_until(
        &self,
        value: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Option<Leadership<B::Leadership>>> {
        crate::limits::check_value("election value", value)?;
        let won = self
            .labels
            .timed(|| self.backend.campaign(value, deadline))?;
        Ok(won.map(|lease| Leadership::counted(lease, &self.labels)))
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
        self.campaign_until(value, deadline_after(timeout))
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
        self.campaign_until(value, Some(deadline))
    }

    /// The current leader, if any.
    ///
    /// # Errors
    ///
    /// Backend errors.
    pub fn leader(&self) -> Result<Option<LeaderInfo>> {
        self.backend.leader()
    }

    /// Follow the leader: the observer first receives the current leader
    /// (if any), then every change — a new leader, or a new value the
    /// leader proclaimed. See [`ElectionBackend::observe`].
    ///
    /// # Errors
    ///
    /// Backend errors if the watch or the first read failed.
    pub fn observe(&self) -> Result<LeaderObserver> {
        self.backend.observe()
    }
}

/// Follows an election's leader; made by [`Election::observe`].
///
/// Dropping it stops the watch; the channel disconnects when the client
/// closes. Under pause and partition it reports what the store said, late
/// by as long as the observer was paused or cut off, and changes in between
/// may be coalesced into the newest. A reported leader may already be gone:
/// it is no proof of leadership and carries no fence.
#[derive(Debug)]
pub struct LeaderObserver {
    rx: Receiver<LeaderInfo>,
    looks: Receiver<()>,
    // Dropping it stops the backend's watch task.
    _stop: oneshot::Sender<()>,
}

impl LeaderObserver {
    /// An observer fed by a backend's watch task through `rx`; the task
    /// stops when `stop`'s receiver sees it dropped.
    pub fn new(rx: Receiver<LeaderInfo>, stop: oneshot::Sender<()>) -> LeaderObserver {
        LeaderObserver {
            rx,
            looks: crossbeam_channel::never(),
            _stop: stop,
        }
    }

    /// The same, also ticking [`looks`](LeaderObserver::looks) on `looks`.
    pub fn with_looks(self, looks: Receiver<()>) -> LeaderObserver {
        LeaderObserver { looks, ..self }
    }

    /// A tick after every look at the store: the first, then one each time
    /// the watch fired — any candidate came or went, or changed its value,
    /// not only the leader (on Redis a newcomer is seen at the next poll:
    /// only goings are published). Ticks are coalesced into one pending:
    /// the cue to read the whole queue again, as `recipes status --watch`
    /// does. It disconnects when the observer's task ends.
    pub fn looks(&self) -> &Receiver<()> {
        &self.looks
    }

    /// The leader changes, for `crossbeam_channel::select!`; it disconnects
    /// when the client closes.
    pub fn receiver(&self) -> &Receiver<LeaderInfo> {
        &self.rx
    }

    /// The next change, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] when nothing changed in time;
    /// [`RecvTimeoutError::Disconnected`] once the client closed.
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> std::result::Result<LeaderInfo, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
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

    /// A leadership over a lease a backend won by other means (a leader
    /// selector's term, say). It resigns when dropped.
    pub fn from_lease(lease: L) -> Leadership<L> {
        Leadership::over(Hold::new(lease))
    }

    /// A leadership counted in the metrics of `labels` (the leader gauge).
    pub(crate) fn counted(lease: L, labels: &Labels) -> Leadership<L> {
        Leadership::over(Hold::counted(lease, labels, true))
    }

    fn over(hold: Hold<L>) -> Leadership<L> {
        let token = hold.lease().token();
        Leadership { hold, token }
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
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a value
    /// over [`MAX_VALUE_BYTES`](crate::MAX_VALUE_BYTES);
    /// [`Error::Indeterminate`](crate::Error::Indeterminate) when no
    /// confirmation came; backend errors.
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
    /// - [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease was
    ///   already gone before the call: another holder may have run while
    ///   this one still worked;
    /// - [`Error::Indeterminate`](crate::Error::Indeterminate) when the store
    ///   did not confirm within the RPC timeout: the removal goes on in the
    ///   background while the session lives, and the session's end removes
    ///   the entry in any case;
    /// - other backend errors.
    pub fn resign(self) -> Result<()> {
        self.hold.release()
    }
}

/// The backend's lease, so that what only that store has (its own fenced
/// writes, say) is a method of the guard too.
impl<L: LeadershipLease> std::ops::Deref for Leadership<L> {
    type Target = L;

    fn deref(&self) -> &L {
        self.lease()
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
