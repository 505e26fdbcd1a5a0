//! One etcd session: a lease, its keep-alive stream and its validity epoch.
//!
//! The lease is granted once; a keep-alive request goes out every TTL/3 on
//! etcd-client's keep-alive stream. The server answers every request on a
//! stream in order (or ends the stream), so replies are matched to send
//! times first-in first-out, and each reply's TTL feeds the session's
//! [`SessionLease`] with the send time of the request it answers. A reply
//! with TTL ≤ 0 means the lease is gone: loss, [`LossReason::Revoked`].
//!
//! etcd-client does not re-open a keep-alive stream whose member died; this
//! loop does. While no stream is up the deadline is simply not renewed, and
//! the session is lost when it passes. A lost session is dead for good: the
//! client grants a new lease for the next acquisition, and every key of the
//! old one goes (with the lease, which is revoked when possible).
//!
//! # One key per lease and name
//!
//! Two acquisitions of one name on one lease would own the same key, so
//! each session hands out one *turn* per name at a time
//! (`Session::try_turn`, `Session::queue_turn`), held until the key is
//! gone; the client's pool and the handles' queues (`HandleQueue`) are
//! described at [`EtcdClient`](crate::EtcdClient). A semaphore's internal
//! mutex keeps to the primary session and waits for its turn there: every
//! permit has a key of its own (`<lease id>-<n>`), so one lease serves any
//! number of them.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::{Error, LossReason, LossTrigger, Result, SessionLease, SharedClock};
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

use crate::rpc::retrying;

mod keep_alive;

/// What a new session needs.
pub(crate) struct SessionSettings {
    pub(crate) ttl: Duration,
    pub(crate) rpc_timeout: Duration,
    pub(crate) slack: Duration,
    pub(crate) clock: SharedClock,
    pub(crate) loss_parent: LossTrigger,
    pub(crate) handle: tokio::runtime::Handle,
}

pub(crate) struct Session {
    // `None` only inside `Drop`, where it is dropped with the runtime
    // entered.
    etcd: Option<etcd_client::Client>,
    lease: i64,
    ttl: Duration,
    label: String,
    rpc_timeout: Duration,
    epoch: SessionLease,
    handle: tokio::runtime::Handle,
    // Set by `orphan` and `revoke`: the keep-alive loop stops.
    stopped: AtomicBool,
    stop: Notify,
    // One in-process queue per lock name; see the module docs.
    queues: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Session {
    /// Grant a lease and start keeping it alive. Runs on the runtime.
    pub(crate) async fn grant(
        etcd: etcd_client::Client,
        settings: &SessionSettings,
    ) -> Result<Arc<Session>> {
        let asked = ttl_seconds(settings.ttl);
        let sent_at = settings.clock.now();
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
        recipes_core::check_lease("the TTL etcd granted", ttl, settings.slack)?;
        let epoch = SessionLease::start(
            &label,
            &settings.loss_parent,
            settings.clock.clone(),
            settings.slack,
        )?;
        epoch.acknowledged(sent_at, ttl);
        let session = Arc::new(Session {
            etcd: Some(etcd),
            lease,
            ttl,
            label,
            rpc_timeout: settings.rpc_timeout,
            epoch,
            handle: settings.handle.clone(),
            stopped: AtomicBool::new(false),
            stop: Notify::new(),
            queues: Mutex::new(HashMap::new()),
        });
        settings
            .handle
            .spawn(keep_alive::keep_alive(session.clone()));
        log::debug!("[{}] session started, TTL {ttl:?}", session.label);
        Ok(session)
    }

    pub(crate) fn etcd(&self) -> Result<etcd_client::Client> {
        self.etcd.clone().ok_or(Error::Closed)
    }

    pub(crate) fn lease(&self) -> i64 {
        self.lease
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.rpc_timeout
    }

    pub(crate) fn epoch(&self) -> &SessionLease {
        &self.epoch
    }

    /// Whether new acquisitions may use this session: not lost, not
    /// orphaned, not revoked.
    pub(crate) fn is_usable(&self) -> bool {
        !self.stopped.load(Ordering::SeqCst) && !self.epoch.is_lost()
    }

    /// Whether keep-alives were stopped (`orphan` or `revoke`).
    pub(crate) fn is_orphaned(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Whether the session is lost (the lease is gone or may be).
    pub(crate) fn is_lost(&self) -> bool {
        self.epoch.is_lost()
    }

    /// Stop renewing the lease without revoking it: the server expires it
    /// after its TTL, and the epoch is lost at its deadline.
    pub(crate) fn orphan(&self) {
        if !self.stopped.swap(true, Ordering::SeqCst) {
            log::debug!("[{}] orphaned: keep-alives stop", self.label);
        }
        self.stop.notify_one();
    }

    /// Stop renewing and revoke the lease: every key of it goes at once.
    /// Guards on it are lost first, with `reason`.
    pub(crate) async fn revoke(&self, reason: LossReason) -> Result<()> {
        self.epoch.fire(reason);
        self.orphan();
        self.revoke_once().await
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

    /// The queue of this session's acquisitions of the lock `name`.
    fn queue(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock();
        queues.retain(|_, q| q.strong_count() > 0);
        match queues.get(name).and_then(Weak::upgrade) {
            Some(q) => q,
            None => {
                let q = Arc::new(tokio::sync::Mutex::new(()));
                queues.insert(name.to_owned(), Arc::downgrade(&q));
                q
            }
        }
    }

    /// Wait for this process's turn at the lock `name` on this session,
    /// until `deadline`. `None` when the deadline passed first.
    pub(crate) async fn queue_turn(
        &self,
        name: &str,
        deadline: Option<Instant>,
    ) -> Option<OwnedMutexGuard<()>> {
        wait_turn(self.queue(name), deadline).await
    }

    /// This session's turn at the lock `name` if nobody in this process has
    /// it (no acquisition of the name on this lease is under way or held).
    pub(crate) fn try_turn(&self, name: &str) -> Option<OwnedMutexGuard<()>> {
        self.queue(name).try_lock_owned().ok()
    }
}

/// Take a turn in `queue`, waiting until `deadline` at most.
async fn wait_turn(
    queue: Arc<tokio::sync::Mutex<()>>,
    deadline: Option<Instant>,
) -> Option<OwnedMutexGuard<()>> {
    match deadline {
        // `timeout_at` polls once even with a deadline in the past, so a
        // free queue is taken by a try-lock.
        Some(d) => tokio::time::timeout_at(d, queue.lock_owned()).await.ok(),
        None => Some(queue.lock_owned().await),
    }
}

/// The local queue of one lock or election handle (and its clones): threads
/// that share the handle take turns here, holding no key while they wait.
/// A turn is kept for as long as the guard it led to holds its key.
#[derive(Debug, Clone, Default)]
pub(crate) struct HandleQueue(Arc<tokio::sync::Mutex<()>>);

impl HandleQueue {
    /// Wait for this handle's turn until `deadline`; `None` when it passed
    /// first.
    pub(crate) async fn turn(&self, deadline: Option<Instant>) -> Option<OwnedMutexGuard<()>> {
        wait_turn(self.0.clone(), deadline).await
    }
}

/// An acquisition's places in this process's queues, given back together
/// once its key is gone: the session's turn at the name (one key per lease
/// and name) and the handle's turn (threads sharing the handle).
#[derive(Debug, Default)]
pub(crate) struct Turns {
    // Held for their `Drop` only.
    _session: Option<OwnedMutexGuard<()>>,
    _handle: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    pub(crate) fn new(
        session: Option<OwnedMutexGuard<()>>,
        handle: Option<OwnedMutexGuard<()>>,
    ) -> Turns {
        Turns {
            _session: session,
            _handle: handle,
        }
    }

    /// Hold the handle's turn too.
    pub(crate) fn hold_handle(&mut self, handle: Option<OwnedMutexGuard<()>>) {
        self._handle = handle;
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
