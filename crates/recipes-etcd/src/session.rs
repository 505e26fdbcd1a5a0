//! One etcd session: a lease, its keep-alive loop (`keep_alive.rs`) and its
//! validity epoch ([`SessionLease`]). A lost session is dead for good: the
//! client grants a new lease for the next acquisition, and every key of the
//! old one goes with the lease, which is revoked when possible.
//!
//! Two acquisitions of one name on one lease would own the same key, so
//! each session hands out one *turn* per name at a time (core's
//! [`NamedTurns`]), held until the key is gone; see
//! [`EtcdClient`](crate::EtcdClient). A semaphore's internal mutex waits
//! for its turn on the client's session: every permit has a key of its own
//! (`<lease id>-<n>`), so one lease serves any number of them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{
    Backoff, Error, LossReason, NamedTurns, PooledSession, Result, Runtime, SessionLease, Settings,
    StopFlag,
};

use tokio::time::Instant;

use crate::rpc::retrying;

mod keep_alive;

pub(crate) struct Session {
    // `None` only inside `Drop`, where it is dropped with the runtime
    // entered.
    etcd: Option<etcd_client::Client>,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    pub(crate) label: String,
    pub(crate) rpc_timeout: Duration,
    pub(crate) epoch: SessionLease,
    handle: tokio::runtime::Handle,
    // Set by `orphan` and `revoke`: the keep-alive loop stops.
    stop: StopFlag,
    // One in-process turn per lock name; see the module docs.
    turns: NamedTurns,
    single_use: bool,
}

impl Session {
    /// Grant a lease and start keeping it alive on `rt`; a `single_use`
    /// one serves one acquisition alone (see [`Session::is_single_use`]).
    /// Runs on the runtime.
    pub(crate) async fn grant(
        etcd: etcd_client::Client,
        settings: &Settings,
        rt: &Runtime,
        single_use: bool,
    ) -> Result<Arc<Session>> {
        let asked = ttl_seconds(settings.ttl);
        let clock = recipes_core::system_clock();
        let sent_at = clock.now();
        // A grant sent twice leaks a lease without keys for one TTL: harmless.
        let granted = retrying("grant an etcd lease", settings.rpc_timeout, || {
            let mut etcd = etcd.clone();
            async move { etcd.lease_grant(asked, None).await }
        })
        .await?;
        let (lease, ttl) = (granted.id(), granted.ttl());
        if ttl <= 0 {
            return Err(Error::Backend {
                message: format!("etcd granted lease {lease:x} a TTL of {ttl} s"),
                retryable: true,
                source: None,
            });
        }
        let ttl = Duration::from_secs(ttl.unsigned_abs());
        let label = format!("lease={lease:x}");
        if ttl != Duration::from_secs(asked.unsigned_abs()) {
            log::info!("[{label}] asked for a TTL of {asked} s, etcd granted {ttl:?}");
        }
        // An unusable grant would make every acquisition lost at once; the
        // lease is left to expire.
        let slack = settings.lease_slack;
        recipes_core::check_lease("the TTL etcd granted", ttl, slack)?;
        let epoch = SessionLease::start(&label, rt.loss_root(), clock, slack)?;
        epoch.acknowledged(sent_at, ttl);
        let session = Arc::new(Session {
            etcd: Some(etcd),
            lease,
            ttl,
            label,
            rpc_timeout: settings.rpc_timeout,
            epoch,
            handle: rt.handle().clone(),
            stop: StopFlag::default(),
            turns: NamedTurns::default(),
            single_use,
        });
        rt.handle().spawn(keep_alive::keep_alive(session.clone()));
        log::debug!("[{}] session started, TTL {ttl:?}", session.label);
        Ok(session)
    }

    pub(crate) fn etcd(&self) -> Result<etcd_client::Client> {
        self.etcd.clone().ok_or(Error::Closed)
    }

    /// Whether new acquisitions may use this session: not lost, not
    /// orphaned, not revoked.
    pub(crate) fn is_usable(&self) -> bool {
        !self.stop.is_stopped() && !self.epoch.is_lost()
    }

    /// Whether this lease serves one acquisition alone: granted because the
    /// client's lease already had an acquisition of the name, and revoked
    /// (taking its key along) once that acquisition ends without a win or
    /// its guard goes.
    pub(crate) fn is_single_use(&self) -> bool {
        self.single_use
    }

    /// Whether keep-alives were stopped (`orphan` or `revoke`).
    pub(crate) fn is_orphaned(&self) -> bool {
        self.stop.is_stopped()
    }

    /// Whether the session is lost (the lease is gone or may be).
    pub(crate) fn is_lost(&self) -> bool {
        self.epoch.is_lost()
    }

    /// Stop renewing the lease without revoking it: the server expires it
    /// after its TTL, and the epoch is lost at its deadline.
    pub(crate) fn orphan(&self) {
        if self.stop.stop() {
            log::debug!("[{}] orphaned: keep-alives stop", self.label);
        }
    }

    /// Stop renewing and revoke the lease: every key of it goes at once.
    /// Guards on it are lost first, with `reason`.
    pub(crate) async fn revoke(&self, reason: LossReason) -> Result<()> {
        self.epoch.fire(reason);
        self.orphan();
        self.revoke_once().await
    }

    /// Stop renewing and revoke the lease, trying for a TTL (by then the
    /// server has expired it anyway). Guards on it are lost first, with
    /// `reason`.
    pub(crate) async fn end(&self, reason: LossReason) {
        self.epoch.fire(reason);
        self.orphan();
        let give_up = Instant::now() + self.ttl;
        let mut backoff = Backoff::RETRY;
        while let Err(e) = self.revoke_once().await {
            if Instant::now() >= give_up {
                log::debug!(
                    "[{}] revoke failed: {e}; the server expires the lease",
                    self.label
                );
                return;
            }
            backoff.pause().await;
        }
    }

    async fn revoke_once(&self) -> Result<()> {
        let etcd = self.etcd()?;
        let what = format!("revoke lease {:x}", self.lease);
        retrying(&what, self.rpc_timeout, || {
            let mut etcd = etcd.clone();
            async move {
                match etcd.lease_revoke(self.lease).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_lease_not_found(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
        log::debug!("[{}] lease revoked", self.label);
        Ok(())
    }
}

impl PooledSession for Session {
    fn is_usable(&self) -> bool {
        Session::is_usable(self)
    }

    fn turns(&self) -> &NamedTurns {
        &self.turns
    }

    async fn discard(self: Arc<Self>) {
        let _ = self.revoke(LossReason::Closed).await;
    }
}

/// etcd wants whole seconds: round up, so the lease is never shorter than
/// asked.
pub(crate) fn ttl_seconds(ttl: Duration) -> i64 {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// The server's "requested lease not found", as a gRPC status or as
/// etcd-client's keep-alive error.
pub(crate) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        etcd_client::Error::LeaseKeepAliveError(msg) => msg.contains("not found"),
        _ => false,
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(etcd) = self.etcd.take() {
            // tonic's channel may need the runtime's context.
            let _enter = self.handle.enter();
            drop(etcd);
        }
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("lease", &format_args!("{:x}", self.lease))
            .field("ttl", &self.ttl)
            .field("valid_until", &self.epoch.valid_until())
            .field("lost", &self.is_lost())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::from_secs(10)), 10);
        assert_eq!(ttl_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ttl_seconds(Duration::MAX), i64::MAX);
    }
}
