//! A session that is a lease in the store: granted with a TTL, renewed on
//! a stream while it lives, revoked when it ends — etcd's leases, a
//! PostgreSQL session row. The store supplies three verbs
//! ([`LeaseStore`]); the grant's timing, the local deadline
//! ([`SessionLease`]), the renewal loop (`lease_session/renew.rs`), the
//! revoke on every way out and the in-process turns live here, once.
//!
//! A lost session is dead for good: the client grants a new lease for the
//! next acquisition, and every entry of the old one goes with the lease,
//! which is revoked when possible.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::deadline::check_lease;
use crate::error::{Error, Result};
use crate::lease::{LossPolicy, SessionLease};
use crate::limits::Settings;
use crate::loss::LossReason;
use crate::renewal::{RenewalStream, StopFlag};
use crate::retry::{until_done, within};
use crate::runtime::Runtime;
use crate::sessions::{NamedTurns, PooledSession};

mod renew;

/// What opening a renewal stream found.
#[derive(Debug)]
pub enum Opened<R> {
    /// The stream; opening it renewed the lease for its granted TTL, as of
    /// the time the open was sent (etcd's keep-alive stream does).
    Renewed(R),
    /// The stream; nothing renewed yet.
    Ready(R),
    /// The store says the lease is gone.
    Gone,
}

/// A store's leases: the verbs a [`LeaseSession`] needs. Each is given the
/// RPC timeout and may resend within it where that is safe.
pub trait LeaseStore: Clone + Send + Sync + 'static {
    /// One lease's renewal stream.
    type Renewals: RenewalStream + 'static;

    /// How logs name the lease `id` (`lease=1a2b`).
    fn label(&self, id: i64) -> String;

    /// Grant a lease of at least `ttl`: its id and the TTL granted. A grant
    /// applied twice leaves a lease without entries, which expires.
    fn grant(
        &self,
        ttl: Duration,
        timeout: Duration,
    ) -> impl Future<Output = Result<(i64, Duration)>> + Send;

    /// Open a renewal stream of the lease `id`.
    fn renewals(
        &self,
        id: i64,
        timeout: Duration,
    ) -> impl Future<Output = Result<Opened<Self::Renewals>>> + Send;

    /// Revoke the lease `id` and every entry bound to it; one already gone
    /// is `Ok`.
    fn revoke(&self, id: i64, timeout: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Whether the store's data can come back older than the client left
    /// it, so that the renewal loop runs [`audit`](LeaseStore::audit).
    const AUDITS: bool = false;

    /// Release the entries of the live lease `id` that nothing of the
    /// client owns ([`OwnedEntries`](crate::store::OwnedEntries)): run
    /// about once a TTL ([`AUDIT_EVERY`](crate::store::AUDIT_EVERY)
    /// renewal intervals) while the lease lives, in a task of its own; its
    /// errors are the store's to log. Nothing by default.
    fn audit(&self, id: i64, timeout: Duration) -> impl Future<Output = ()> + Send + 'static {
        let _ = (id, timeout);
        async {}
    }
}

/// One lease of a [`LeaseStore`], kept alive on the client's runtime until
/// it is lost, orphaned or revoked.
///
/// Two acquisitions of one name on one lease would own the same entry
/// where the store names entries by lease (etcd's `<name>/<lease id>`), so
/// the session hands out one turn per name at a time ([`NamedTurns`]).
pub struct LeaseSession<S: LeaseStore> {
    // `None` only inside `Drop`, where it is dropped with the runtime
    // entered (tonic's channel needs it).
    store: Option<S>,
    id: i64,
    ttl: Duration,
    label: String,
    rpc_timeout: Duration,
    epoch: SessionLease,
    handle: tokio::runtime::Handle,
    // Set by `orphan` and `revoke`: renewals stop.
    stop: StopFlag,
    turns: NamedTurns,
    single_use: bool,
    policy: LossPolicy,
}

impl<S: LeaseStore> LeaseSession<S> {
    /// Grant a lease and start renewing it on `rt`; a `single_use` one
    /// serves one acquisition alone (see [`LeaseSession::is_single_use`]).
    /// Runs on the runtime.
    ///
    /// # Errors
    ///
    /// Those of the grant; [`Error::InvalidArgument`] when the granted TTL
    /// leaves no room for the safety margin (the lease is left to expire).
    pub async fn grant(
        store: S,
        settings: &Settings,
        rt: &Runtime,
        single_use: bool,
    ) -> Result<Arc<LeaseSession<S>>> {
        let clock = crate::clock::system_clock();
        let sent_at = clock.now();
        let granted = store.grant(settings.ttl, settings.rpc_timeout);
        let (id, ttl) = within("grant a lease", settings.rpc_timeout, granted).await?;
        let label = store.label(id);
        if ttl.is_zero() {
            return Err(Error::Backend {
                message: format!("[{label}] the store granted a TTL of zero"),
                retryable: true,
                source: None,
            });
        }
        if ttl < settings.ttl || ttl >= settings.ttl + Duration::from_secs(1) {
            log::info!(
                "[{label}] asked for a TTL of {:?}, granted {ttl:?}",
                settings.ttl
            );
        }
        let slack = settings.lease_slack;
        check_lease("the granted TTL", ttl, slack)?;
        let epoch = SessionLease::start(&label, rt.loss_root(), clock, slack)?;
        epoch.acknowledged(sent_at, ttl);
        let session = Arc::new(LeaseSession {
            store: Some(store),
            id,
            ttl,
            label,
            rpc_timeout: settings.rpc_timeout,
            epoch,
            handle: rt.handle().clone(),
            stop: StopFlag::default(),
            turns: NamedTurns::default(),
            single_use,
            policy: settings.loss_policy,
        });
        rt.handle().spawn(renew::renew(session.clone()));
        log::debug!("[{}] session started, TTL {ttl:?}", session.label);
        Ok(session)
    }

    /// The store's handle, unless the session is being dropped.
    pub fn store(&self) -> Result<S> {
        self.store.clone().ok_or(Error::Closed)
    }

    /// The store's handle, borrowed: for a request that needs no handle
    /// of its own (a clone of a store's client can cost more than the
    /// request's encoding).
    pub fn store_ref(&self) -> Result<&S> {
        self.store.as_ref().ok_or(Error::Closed)
    }

    /// The lease's id in the store.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL the store granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How logs name the session.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The deadline of one request.
    pub fn rpc_timeout(&self) -> Duration {
        self.rpc_timeout
    }

    /// The session's validity: its deadline and loss signal.
    pub fn epoch(&self) -> &SessionLease {
        &self.epoch
    }

    /// Whether new acquisitions may use this session: not lost, not
    /// orphaned, not revoked.
    pub fn is_usable(&self) -> bool {
        !self.stop.is_stopped() && !self.epoch.is_lost()
    }

    /// Whether this lease serves one acquisition alone: granted because the
    /// client's lease already had an acquisition of the name, and revoked
    /// (taking its entry along) once that acquisition ends without a win
    /// or its guard goes.
    pub fn is_single_use(&self) -> bool {
        self.single_use
    }

    /// Whether renewals were stopped (`orphan` or `revoke`).
    pub fn is_orphaned(&self) -> bool {
        self.stop.is_stopped()
    }

    /// Whether the session is lost (the lease is gone or may be).
    pub fn is_lost(&self) -> bool {
        self.epoch.is_lost()
    }

    /// Stop renewing the lease without revoking it: the store expires it
    /// after its TTL, and the epoch is lost at its deadline.
    pub fn orphan(&self) {
        if self.stop.stop() {
            log::debug!("[{}] orphaned: renewals stop", self.label);
        }
    }

    /// Stop renewing and revoke the lease: every entry of it goes at once.
    /// Guards on it are lost first, with `reason`.
    ///
    /// # Errors
    ///
    /// Those of the revoke (the store then expires the lease).
    pub async fn revoke(&self, reason: LossReason) -> Result<()> {
        self.epoch.fire(reason);
        self.orphan();
        self.revoke_once().await
    }

    /// [`revoke`](LeaseSession::revoke), trying for a TTL (by then the
    /// store has expired the lease anyway).
    pub async fn end(&self, reason: LossReason) {
        self.epoch.fire(reason);
        self.orphan();
        let give_up = Instant::now() + self.ttl;
        let what = format!("[{}] revoke (else the store expires the lease)", self.label);
        let expired = || Instant::now() >= give_up;
        until_done(&what, Backoff::RETRY, expired, || self.revoke_once()).await;
    }

    async fn revoke_once(&self) -> Result<()> {
        let store = self.store()?;
        let revoked = store.revoke(self.id, self.rpc_timeout);
        within("revoke a lease", self.rpc_timeout, revoked).await?;
        log::debug!("[{}] lease revoked", self.label);
        Ok(())
    }
}

impl<S: LeaseStore> PooledSession for LeaseSession<S> {
    fn is_usable(&self) -> bool {
        LeaseSession::is_usable(self)
    }

    fn turns(&self) -> &NamedTurns {
        &self.turns
    }

    async fn discard(self: Arc<Self>) {
        let _ = self.revoke(LossReason::Closed).await;
    }
}

impl<S: LeaseStore> Drop for LeaseSession<S> {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            let _enter = self.handle.enter();
            drop(store);
        }
    }
}

impl<S: LeaseStore> fmt::Debug for LeaseSession<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseSession")
            .field("label", &self.label)
            .field("ttl", &self.ttl)
            .field("valid_until", &self.epoch.valid_until())
            .field("lost", &self.is_lost())
            .finish()
    }
}
