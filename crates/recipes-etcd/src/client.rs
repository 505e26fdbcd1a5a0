//! The etcd client: one connection pool on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{BootInstant, Error, LossReason, Result, Runtime, Sessions, Settings, Turn};

use crate::builder::EtcdClientBuilder;
use crate::session::Session;

struct Inner {
    // Dropped with the runtime entered: tonic's channel needs it.
    client: parking_lot::Mutex<Option<etcd_client::Client>>,
    rt: Runtime,
    config: EtcdClientBuilder,
    // The current session (lease) and the single-use ones of concurrent
    // acquisitions of one name; revoked with the client.
    sessions: Sessions<Session>,
}

impl Inner {
    fn etcd(&self) -> Result<etcd_client::Client> {
        self.client.lock().clone().ok_or(Error::Closed)
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.sessions.current()
    }

    /// The current session, or a new lease once it is lost or orphaned.
    async fn session(&self) -> Result<Arc<Session>> {
        self.sessions.primary(|| self.grant(false)).await
    }

    /// Grant a new lease and start its session: the client's, or a
    /// single-use one.
    async fn grant(&self, single_use: bool) -> Result<Arc<Session>> {
        let (etcd, settings) = (self.etcd()?, &self.config.settings);
        let session = Session::grant(etcd, settings, &self.rt, single_use).await?;
        let what = if single_use {
            "single-use lease"
        } else {
            "session"
        };
        log::debug!(
            "[endpoints={}] new {what}: lease {:x}, TTL {:?}",
            self.config.endpoints.join(","),
            session.lease,
            session.ttl
        );
        Ok(session)
    }

    /// Close: the sessions to revoke (orphaned ones are left to expire),
    /// their keep-alives stopped; the connection dropped (requests already
    /// made keep their handles).
    fn close(&self) -> Vec<Arc<Session>> {
        let mut live = self.sessions.close();
        live.retain(|s| !s.is_orphaned());
        live.iter().for_each(|s| s.orphan());
        if let Some(client) = self.client.lock().take() {
            let _enter = self.rt.enter();
            drop(client);
        }
        live
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Revoke the leases in the background: the runtime's shutdown
        // gives it a grace period.
        for session in self.close() {
            self.rt.spawn(async move {
                let _ = session.revoke(LossReason::Closed).await;
            });
        }
    }
}

/// An etcd client on its own runtime thread, holding one lease (its
/// session) that its recipes' keys are bound to; see
/// [`recipes_core::Client`] for what it does.
///
/// One lease serves every lock, election and semaphore of the client: one
/// keep-alive stream, and an uncontended acquire costs one transaction, a
/// release one delete. Two acquisitions of the *same* name must not share
/// a lease — they would own the same key `<name>/<lease id>`, one identity
/// in etcd (etcd#11360) — so threads sharing one handle (a
/// [`Mutex`](crate::Mutex) or [`Election`](crate::Election), and its
/// clones) take turns in the process, holding no key while they wait, and
/// separate handles of one name contend in etcd: when the client's lease
/// already has an acquisition of the name under way or held, the next one
/// gets a *single-use* lease of its own, newly granted with its own
/// keep-alive stream. A single-use lease lives as long as its acquisition
/// and then its guard: it is revoked (taking the key along) when the
/// acquisition ends without a win and when the guard is released or
/// dropped, and with the client at the latest.
///
/// Cheap to clone; it closes when the last clone (and every guard made from
/// it) is dropped, or at [`close`](recipes_core::Client::close), which
/// revokes its leases, so its locks are free at once.
///
/// While no keep-alive is acknowledged (a partition, a paused process, a
/// dead member) the local deadline ([`valid_until`](EtcdClient::valid_until))
/// is not renewed, and when it passes every guard of the lease is lost. Not
/// guaranteed: that etcd keeps the lease as long as we assume — etcd 3.4.23
/// can revoke a kept-alive lease (etcd#15247); each held key is watched, so
/// that shows as loss too.
#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

impl EtcdClient {
    /// Settings for a client of the members at `endpoints` (`host:port`).
    pub fn builder<I, S>(endpoints: I) -> EtcdClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            user: None,
            settings: Settings::default(),
        }
    }

    /// Connect with default settings.
    ///
    /// # Errors
    ///
    /// As for [`EtcdClientBuilder::connect`].
    pub fn connect<I, S>(endpoints: I) -> Result<EtcdClient>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdClient::builder(endpoints).connect()
    }

    /// A client of the connected `etcd`, with its first lease granted.
    pub(crate) fn start(
        config: EtcdClientBuilder,
        etcd: etcd_client::Client,
        rt: Runtime,
    ) -> Result<EtcdClient> {
        let client = EtcdClient {
            inner: Arc::new(Inner {
                client: parking_lot::Mutex::new(Some(etcd)),
                rt,
                config,
                sessions: Sessions::default(),
            }),
        };
        let inner = client.inner.clone();
        client.call("grant the client's lease", async move {
            inner.session().await.map(drop)
        })?;
        Ok(client)
    }

    /// The deadline of one request.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.inner.config.settings.rpc_timeout
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.config.endpoints
    }

    /// The TTL etcd granted the current lease (which may be more than
    /// asked: etcd raises a TTL below its minimum). Zero once closed.
    pub fn session_ttl(&self) -> Duration {
        self.inner.current().map(|s| s.ttl).unwrap_or_default()
    }

    /// The longest a lease of this client can outlive its newest
    /// acknowledged keep-alive: the granted TTL, or the configured one once
    /// the session is gone, whichever is longer.
    pub(crate) fn lease_span(&self) -> Duration {
        self.inner.config.settings.ttl.max(self.session_ttl())
    }

    /// Until when the current lease may be assumed alive on the server: the
    /// send time of the newest acknowledged keep-alive plus the granted TTL,
    /// less the safety margin. Always earlier than the server's own expiry
    /// while the clocks run within 500 ppm of each other. `None` once
    /// closed.
    pub fn valid_until(&self) -> Option<BootInstant> {
        self.inner.current().and_then(|s| s.epoch.valid_until())
    }

    /// Whether the current lease is lost: its deadline passed, the server
    /// said it is gone, or it was orphaned or revoked. The next acquisition
    /// then grants a new lease.
    pub fn is_session_lost(&self) -> bool {
        self.inner.current().is_none_or(|s| !s.is_usable())
    }

    /// Stop renewing the current lease — and the single-use ones — without
    /// revoking them, as a crashed process would: the server deletes their
    /// keys when the TTL runs out, and guards held on them fire their loss
    /// signal at their local deadline (before that). Later acquisitions
    /// grant a new lease; `close` and `Drop` leave the orphaned ones to
    /// expire.
    pub fn orphan(&self) {
        for s in self.inner.sessions.all() {
            s.orphan();
        }
    }

    /// The current session, if any.
    pub(crate) fn current_session(&self) -> Option<Arc<Session>> {
        self.inner.current()
    }

    /// A handle of the connection, unless closed.
    pub(crate) fn etcd(&self) -> Result<etcd_client::Client> {
        self.inner.etcd()
    }

    /// The current session, or a new one (on the runtime).
    pub(crate) async fn live_session(&self) -> Result<Arc<Session>> {
        self.inner.session().await
    }

    /// A session and its turn for an acquisition of the lock `name`: the
    /// current session, or a single-use one when an acquisition of `name`
    /// already uses the current one (on the runtime).
    pub(crate) async fn session_for(&self, name: &str) -> Result<(Arc<Session>, Turn)> {
        let single_use = || self.inner.grant(true);
        self.inner.sessions.for_name(name, single_use).await
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.inner
            .rt
            .call(what, self.inner.config.settings.rpc_timeout, fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// [`Client::close_within`](recipes_core::Client::close_within):
    /// revoke the current and the single-use leases (not orphaned ones), so
    /// every key goes at once, then stop the runtime. The revokes are sent
    /// whatever the grace: when it runs out first they go on in the
    /// background for an RPC timeout at most, and the runtime stops after
    /// them.
    pub(crate) fn close_within(&self, grace: Duration) -> Result<()> {
        let revokes = self.inner.close().into_iter().map(|session| async move {
            let revoked = session.revoke(LossReason::Closed).await;
            if let Err(e) = &revoked {
                log::debug!("close: revoke failed: {e}; the server expires the lease");
            }
            revoked
        });
        let what = "revoke the client's leases";
        let (rt, linger) = (&self.inner.rt, self.rpc_timeout());
        recipes_core::end_sessions_within(rt, what, revokes.collect(), grace, linger)
    }
}

impl fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.config.endpoints)
            .field(
                "lease",
                &self.inner.current().map(|s| format!("{:x}", s.lease)),
            )
            .field("session_ttl", &self.session_ttl())
            .finish()
    }
}
