//! A client's lease sessions ([`LeaseSessions`]): the store's connection,
//! the runtime, the settings, and core's [`Sessions`] of
//! [`LeaseSession`]s — the client's own lease, granted anew once lost, and
//! the single-use leases of concurrent acquisitions of one name; all
//! revoked when the client closes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::BootInstant;
use crate::close::end_sessions_within;
use crate::error::{Error, Result};
use crate::lease_session::{LeaseSession, LeaseStore};
use crate::limits::Settings;
use crate::loss::LossReason;
use crate::runtime::Runtime;
use crate::sessions::{PooledSession, Sessions, Turn};

/// The lease sessions of one client of a [`LeaseStore`].
pub struct LeaseSessions<S: LeaseStore> {
    // Dropped with the runtime entered.
    store: Mutex<Option<S>>,
    rt: Runtime,
    settings: Settings,
    sessions: Sessions<LeaseSession<S>>,
}

impl<S: LeaseStore> LeaseSessions<S> {
    /// The sessions of a client connected to `store`, none granted yet.
    pub fn new(store: S, rt: Runtime, settings: Settings) -> LeaseSessions<S> {
        LeaseSessions {
            store: Mutex::new(Some(store)),
            rt,
            settings,
            sessions: Sessions::default(),
        }
    }

    /// The store's handle, unless closed.
    pub fn store(&self) -> Result<S> {
        self.store.lock().clone().ok_or(Error::Closed)
    }

    /// The runtime the client runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The client's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The client's current session, whatever its state.
    pub fn current(&self) -> Option<Arc<LeaseSession<S>>> {
        self.sessions.current()
    }

    /// The current session, or a new lease once it is lost or orphaned (on
    /// the runtime).
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once closed; errors of the grant.
    pub async fn primary(&self) -> Result<Arc<LeaseSession<S>>> {
        self.sessions.primary(|| self.grant(false)).await
    }

    /// A session and its turn for an acquisition of the name `name`: the
    /// current session, or a single-use one when an acquisition of `name`
    /// already uses the current one (on the runtime).
    ///
    /// # Errors
    ///
    /// As for [`primary`](LeaseSessions::primary).
    pub async fn for_name(&self, name: &str) -> Result<(Arc<LeaseSession<S>>, Turn)> {
        self.sessions.for_name(name, || self.grant(true)).await
    }

    /// [`primary`](LeaseSessions::primary) as a contend driver's epoch,
    /// holding no turn (for entries that are distinct anyway).
    ///
    /// # Errors
    ///
    /// As for [`primary`](LeaseSessions::primary).
    pub async fn epoch(&self) -> Result<LeaseEpoch<S>> {
        Ok(LeaseEpoch::new(self.primary().await?, None))
    }

    /// [`for_name`](LeaseSessions::for_name) as a contend driver's epoch.
    ///
    /// # Errors
    ///
    /// As for [`primary`](LeaseSessions::primary).
    pub async fn epoch_for(&self, name: &str) -> Result<LeaseEpoch<S>> {
        let (session, turn) = self.for_name(name).await?;
        Ok(LeaseEpoch::new(session, Some(turn)))
    }

    /// The primary session once this process's turn at `name` on it is
    /// free, as a contend driver's epoch; `None` when `deadline` passed
    /// first.
    ///
    /// # Errors
    ///
    /// As for [`primary`](LeaseSessions::primary).
    pub async fn epoch_waiting(
        &self,
        name: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<LeaseEpoch<S>>> {
        let session = self.primary().await?;
        let turn = session.turns().wait(name, deadline).await;
        Ok(turn.map(|turn| LeaseEpoch::new(session, Some(turn))))
    }

    async fn grant(&self, single_use: bool) -> Result<Arc<LeaseSession<S>>> {
        let store = self.store()?;
        LeaseSession::grant(store, &self.settings, &self.rt, single_use).await
    }

    /// The TTL the store granted the current lease; zero once closed.
    pub fn granted_ttl(&self) -> Duration {
        self.current().map(|s| s.ttl()).unwrap_or_default()
    }

    /// The longest a lease of this client can outlive its newest
    /// acknowledged renewal: the granted TTL, or the configured one once
    /// the session is gone, whichever is longer.
    pub fn lease_span(&self) -> Duration {
        self.settings.ttl.max(self.granted_ttl())
    }

    /// Until when the current lease may be assumed alive in the store;
    /// `None` once closed.
    pub fn valid_until(&self) -> Option<BootInstant> {
        self.current().and_then(|s| s.epoch().valid_until())
    }

    /// The send time of the current lease's newest acknowledged renewal.
    pub fn last_acknowledged(&self) -> Option<BootInstant> {
        self.current()
            .and_then(|s| s.epoch().last_acknowledged_send())
    }

    /// Whether the current lease is lost (or orphaned, or closed): the next
    /// acquisition then grants a new one.
    pub fn is_lost(&self) -> bool {
        self.current().is_none_or(|s| !s.is_usable())
    }

    /// Stop renewing every lease without revoking it, as a crashed process
    /// would: the store expires them, guards on them are lost at their
    /// local deadline, and later acquisitions grant a new lease.
    pub fn orphan(&self) {
        self.sessions.all().iter().for_each(|s| s.orphan());
    }

    /// Close: the sessions to revoke (orphaned ones are left to expire),
    /// their renewals stopped; the connection dropped (requests already
    /// made keep their handles).
    fn close(&self) -> Vec<Arc<LeaseSession<S>>> {
        let mut live = self.sessions.close();
        live.retain(|s| !s.is_orphaned());
        live.iter().for_each(|s| s.orphan());
        if let Some(store) = self.store.lock().take() {
            let _enter = self.rt.enter();
            drop(store);
        }
        live
    }

    /// Revoke the current and the single-use leases (not orphaned ones),
    /// so every entry goes at once, then stop the runtime; see
    /// [`end_sessions_within`]. The revokes are sent whatever the grace:
    /// when it runs out first they go on in the background for an RPC
    /// timeout at most.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the grace ran out; a failed revoke's error.
    pub fn close_within(&self, grace: Duration) -> Result<()> {
        let revokes = self.close().into_iter().map(|session| async move {
            let revoked = session.revoke(LossReason::Closed).await;
            if let Err(e) = &revoked {
                log::debug!("close: revoke failed: {e}; the store expires the lease");
            }
            revoked
        });
        let (what, linger) = ("revoke the client's leases", self.settings.rpc_timeout);
        end_sessions_within(&self.rt, what, revokes.collect(), grace, linger)
    }
}

impl<S: LeaseStore> Drop for LeaseSessions<S> {
    fn drop(&mut self) {
        // Revoke in the background: the runtime's shutdown gives it a
        // grace period.
        for session in self.close() {
            self.rt.spawn(async move {
                let _ = session.revoke(LossReason::Closed).await;
            });
        }
    }
}

/// A lease session as a contend driver's epoch, with this process's turn
/// at the name on it when the store needs one; the turn goes to the
/// acquisition's ticket ([`take_turn`](LeaseEpoch::take_turn)).
#[derive(Debug)]
pub struct LeaseEpoch<S: LeaseStore> {
    /// The session.
    pub session: Arc<LeaseSession<S>>,
    turn: Mutex<Option<Turn>>,
}

impl<S: LeaseStore> LeaseEpoch<S> {
    fn new(session: Arc<LeaseSession<S>>, turn: Option<Turn>) -> LeaseEpoch<S> {
        LeaseEpoch {
            session,
            turn: Mutex::new(turn),
        }
    }

    /// The turn, once.
    pub fn take_turn(&self) -> Option<Turn> {
        self.turn.lock().take()
    }
}

impl<S: LeaseStore> fmt::Debug for LeaseSessions<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseSessions")
            .field("current", &self.current())
            .field("sessions", &self.sessions)
            .finish()
    }
}
