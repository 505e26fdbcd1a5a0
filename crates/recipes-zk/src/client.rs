//! The ZooKeeper client: one session on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use recipes_core::{
    BootInstant, Error, LossPolicy, LossReason, Result, Runtime, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RPC_TIMEOUT, DEFAULT_SLACK, DEFAULT_TTL,
};
use zookeeper_client as zk;

use crate::error::from_zk;
use crate::session::{Session, SessionState};

/// Settings for a [`ZkClient`]; see [`ZkClient::builder`].
#[derive(Clone)]
pub struct ZkClientBuilder {
    hosts: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    loss_policy: LossPolicy,
    lease_slack: Duration,
    chroot: Option<String>,
    digest: Option<(String, String)>,
}

impl fmt::Debug for ZkClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClientBuilder")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("loss_policy", &self.loss_policy)
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl ZkClientBuilder {
    /// The lease to ask for: on ZooKeeper, the session timeout (the same
    /// setting as [`session_timeout`](ZkClientBuilder::session_timeout);
    /// etcd's builder calls its lease TTL `ttl` too).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.session_timeout(ttl)
    }

    /// The session timeout to ask for. The server clamps it to its
    /// `[minSessionTimeout, maxSessionTimeout]`;
    /// [`ZkClient::session_timeout`] reports what was granted.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](ZkClientBuilder::connect) may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The deadline of each request to the server.
    pub fn rpc_timeout(mut self, timeout: Duration) -> Self {
        self.rpc_timeout = timeout;
        self
    }

    /// What a dropped connection means for held locks.
    pub fn loss_policy(mut self, policy: LossPolicy) -> Self {
        self.loss_policy = policy;
        self
    }

    /// Run every path of this client below `chroot` (ZooKeeper's chroot
    /// suffix of the connect string).
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// Authenticate with ZooKeeper's `digest` scheme as `user`. Every node
    /// this client creates then belongs to that identity (full rights) and
    /// is readable by anyone: participants of one lock must share the
    /// identity, unauthenticated clients can watch but neither queue nor
    /// delete.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some((user.into(), password.into()));
        self
    }

    fn acls(&self) -> zk::Acls<'static> {
        static CREATOR_ALL_ANYONE_READ: [zk::Acl; 2] = [
            zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
            zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
        ];
        match self.digest {
            Some(_) => zk::Acls::new(&CREATOR_ALL_ANYONE_READ),
            None => zk::Acls::anyone_all(),
        }
    }

    /// Scheduling slack subtracted from every lease deadline on top of the
    /// clock-drift margin (default [`DEFAULT_SLACK`]).
    pub fn lease_slack(mut self, slack: Duration) -> Self {
        self.lease_slack = slack;
        self
    }

    fn validate(&self) -> Result<()> {
        let hosts: Vec<&str> = self.hosts.split(',').map(str::trim).collect();
        if self.hosts.trim().is_empty() || hosts.iter().any(|h| h.is_empty()) {
            return Err(Error::invalid(format!(
                "ZooKeeper connect string {:?} has an empty host; give host:port[,host:port…]",
                self.hosts
            )));
        }
        recipes_core::check_ttl(self.session_timeout)?;
        recipes_core::check_timeout("connect timeout", self.connect_timeout)?;
        recipes_core::check_timeout("rpc timeout", self.rpc_timeout)?;
        if let Some(chroot) = &self.chroot {
            crate::names::validate_path(chroot)?;
        }
        if let Some((user, _)) = &self.digest {
            if user.is_empty() || user.contains(':') {
                return Err(Error::invalid(format!(
                    "digest user {user:?} must be non-empty and hold no ':'"
                )));
            }
        }
        recipes_core::check_lease(
            "the session timeout",
            self.session_timeout,
            self.lease_slack,
        )?;
        Ok(())
    }

    /// Connect: start the runtime thread and establish a session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Backend`]
    /// naming the hosts when no session could be established within the
    /// connect timeout.
    pub fn connect(self) -> Result<ZkClient> {
        self.validate()?;
        let rt = Runtime::new("recipes-zk")?;
        let inner = Arc::new(Inner {
            rt,
            settings: self,
            session: parking_lot::Mutex::new(None),
            reconnect: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
        });
        let first = inner.clone();
        inner
            .rt
            .call_until("connect to ZooKeeper", None, async move {
                first.session().await.map(drop)
            })?;
        Ok(ZkClient { inner })
    }
}

struct Inner {
    rt: Runtime,
    settings: ZkClientBuilder,
    // The current session; replaced by a new one after expiry. zookeeper-
    // client sends CloseSession when the last handle of a session is gone.
    session: parking_lot::Mutex<Option<Arc<Session>>>,
    reconnect: tokio::sync::Mutex<()>,
    closed: AtomicBool,
}

impl Inner {
    /// The current session, or a new one if it expired.
    async fn session(&self) -> Result<Arc<Session>> {
        if let Some(s) = self.live_session()? {
            return Ok(s);
        }
        let _one_at_a_time = self.reconnect.lock().await;
        if let Some(s) = self.live_session()? {
            return Ok(s);
        }
        let hosts = self.settings.hosts.clone();
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.settings.session_timeout)
            .with_connection_timeout(self.settings.connect_timeout);
        if let Some((user, password)) = &self.settings.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let sent_at = recipes_core::BootInstant::now();
        let connected =
            tokio::time::timeout(self.settings.connect_timeout, connector.connect(&hosts)).await;
        let zk = match connected {
            Ok(Ok(zk)) => zk,
            Ok(Err(e)) if e != zk::Error::Timeout => {
                return Err(from_zk(&format!("connect to ZooKeeper at {hosts}"), e))
            }
            Ok(Err(_)) | Err(_) => {
                return Err(Error::Backend {
                    message: format!(
                        "no ZooKeeper session with any of {hosts} within {:?}",
                        self.settings.connect_timeout
                    ),
                    retryable: true,
                    source: None,
                })
            }
        };
        // The server may grant less than asked (its maxSessionTimeout); an
        // unusable grant would make every acquisition lost at once. Dropping
        // `zk` closes the session.
        recipes_core::check_lease(
            "the session timeout the server granted",
            zk.session_timeout(),
            self.settings.lease_slack,
        )?;
        let zk = match &self.settings.chroot {
            None => zk,
            Some(chroot) => {
                // Like Curator's namespace: make the root if it is missing.
                let options = zk::CreateMode::Persistent.with_acls(self.settings.acls());
                zk.mkdir(chroot, &options)
                    .await
                    .map_err(|e| from_zk(&format!("create the chroot {chroot}"), e))?;
                zk.chroot(chroot.as_str()).map_err(|_| {
                    Error::invalid(format!("{chroot:?} is not a usable chroot path"))
                })?
            }
        };
        let session = Session::start(
            zk,
            self.settings.acls(),
            sent_at,
            self.settings.loss_policy,
            recipes_core::system_clock(),
            self.settings.lease_slack,
            self.rt.loss_root().clone(),
            self.rt.handle(),
        )?;
        log::debug!(
            "[hosts={hosts}] ZooKeeper session {:#x} established, timeout {:?}",
            session.id(),
            session.timeout()
        );
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        *self.session.lock() = Some(session.clone());
        Ok(session)
    }

    fn live_session(&self) -> Result<Option<Arc<Session>>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(self.session.lock().clone().filter(|s| !s.is_expired()))
    }

    fn current(&self) -> Result<Arc<Session>> {
        self.session.lock().clone().ok_or(Error::Closed)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(session) = self.session.lock().take() {
            let _enter = self.rt.enter();
            drop(session);
        }
    }
}

/// A ZooKeeper client: one session, kept alive on its own runtime thread.
///
/// Cheap to clone; the session closes when the last clone (and every guard
/// made from it) is dropped, or at [`close`](ZkClient::close).
///
/// # Under pause and partition
///
/// A heartbeat every `timeout / 4` keeps the local lease deadline
/// ([`valid_until`](ZkClient::valid_until)); guards are lost when it passes.
/// After a session expiry the client opens a new session on next use;
/// nothing held by the old one comes back. While this process is paused
/// nothing is renewed: when it resumes, every guard reads the clock and
/// reports itself lost if the deadline passed.
#[derive(Clone)]
pub struct ZkClient {
    inner: Arc<Inner>,
}

impl ZkClient {
    /// Settings for a client of the ensemble at `hosts`
    /// (`host:port[,host:port…]`).
    pub fn builder(hosts: impl Into<String>) -> ZkClientBuilder {
        ZkClientBuilder {
            hosts: hosts.into(),
            session_timeout: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            loss_policy: LossPolicy::default(),
            lease_slack: DEFAULT_SLACK,
            chroot: None,
            digest: None,
        }
    }

    /// Connect with default settings.
    ///
    /// # Errors
    ///
    /// As for [`ZkClientBuilder::connect`].
    pub fn connect(hosts: impl Into<String>) -> Result<ZkClient> {
        ZkClient::builder(hosts).connect()
    }

    /// The session timeout the server granted (0 once closed).
    pub fn session_timeout(&self) -> Duration {
        self.inner
            .current()
            .map(|s| s.timeout())
            .unwrap_or_default()
    }

    /// The current session's id (`None` once closed).
    pub fn session_id(&self) -> Option<i64> {
        self.inner.current().map(|s| s.id()).ok()
    }

    /// The current session's state.
    pub fn session_state(&self) -> SessionState {
        self.inner
            .current()
            .map(|s| s.state())
            .unwrap_or(SessionState::Closed)
    }

    /// Until when the current session's lease may be assumed valid: the send
    /// time of the newest acknowledged request plus the session timeout,
    /// less the safety margin. `None` once closed.
    pub fn valid_until(&self) -> Option<BootInstant> {
        let s = self.inner.current().ok()?;
        s.current_epoch().valid_until()
    }

    /// Send time of the newest request the server acknowledged on the
    /// current session (heartbeats included). The server keeps the session
    /// at least until this plus the session timeout.
    pub fn last_acknowledged(&self) -> Option<BootInstant> {
        let s = self.inner.current().ok()?;
        s.current_epoch().last_acknowledged_send()
    }

    /// The loss policy.
    pub fn loss_policy(&self) -> LossPolicy {
        self.inner.settings.loss_policy
    }

    /// The connect string.
    pub fn hosts(&self) -> &str {
        &self.inner.settings.hosts
    }

    /// One round trip to the server; returns how long it took.
    ///
    /// # Errors
    ///
    /// Connection and session errors; [`Error::Timeout`] after the RPC
    /// timeout.
    pub fn ping(&self) -> Result<Duration> {
        let inner = self.inner.clone();
        self.call("ping", async move {
            let session = inner.session().await?;
            let started = Instant::now();
            session
                .zk()
                .check_stat("/")
                .await
                .map_err(|e| from_zk("ping", e))?;
            Ok(started.elapsed())
        })
    }

    /// The current session, or a new one after expiry (on the runtime).
    pub(crate) async fn live_session(&self) -> Result<Arc<Session>> {
        self.inner.session().await
    }

    /// The deadline of one request.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.inner.settings.rpc_timeout
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.inner
            .rt
            .call(what, self.inner.settings.rpc_timeout, fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// Close the session and stop the runtime thread once pending
    /// background releases are done; `grace` bounds the whole. Fires every
    /// loss signal; an acquisition another thread waits in returns
    /// [`Error::Closed`], and the session's nodes (held or queued) are gone
    /// when this returns `Ok`. Other clones of this client stop working
    /// too. Dropping the last clone closes on a best-effort basis.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the server did not confirm the close within
    /// `grace` (it expires the session after its timeout instead).
    pub fn close_within(&self, grace: Duration) -> Result<()> {
        // One budget for every step.
        let until = recipes_core::deadline_in(grace);
        self.inner.closed.store(true, Ordering::SeqCst);
        // A closed session deletes its ephemeral nodes at once rather than
        // after the session timeout. The close request goes out when the last
        // handle is gone; wait (up to `grace`) until the session says so.
        let mut closed = Ok(());
        if let Some(session) = self.inner.session.lock().take() {
            // Whatever still waits on this session (a queued acquisition, a
            // latch contending in the background) holds a handle of it;
            // ending the epoch wakes it, and it finds the client closed.
            session.current_epoch().fire(LossReason::Closed);
            let mut states = session.zk().state_watcher();
            {
                let _enter = self.inner.rt.enter();
                drop(session);
            }
            closed = self.inner.rt.call("close the session", grace, async move {
                let terminal = |s| {
                    matches!(
                        s,
                        zk::SessionState::Closed
                            | zk::SessionState::Expired
                            | zk::SessionState::AuthFailed
                    )
                };
                if !terminal(states.state()) {
                    while !terminal(states.changed().await) {}
                }
                Ok(())
            });
        }
        self.inner
            .rt
            .shutdown(until.saturating_duration_since(Instant::now()));
        closed
    }

    /// [`close_within`](ZkClient::close_within) the default grace
    /// ([`DEFAULT_SHUTDOWN_GRACE`](recipes_core::DEFAULT_SHUTDOWN_GRACE)).
    ///
    /// # Errors
    ///
    /// As for [`close_within`](ZkClient::close_within).
    pub fn close(self) -> Result<()> {
        self.close_within(recipes_core::DEFAULT_SHUTDOWN_GRACE)
    }
}

impl fmt::Debug for ZkClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClient")
            .field("hosts", &self.inner.settings.hosts)
            .field(
                "session_id",
                &self.session_id().map(|id| format!("{id:#x}")),
            )
            .field("state", &self.session_state())
            .field("session_timeout", &self.session_timeout())
            .finish()
    }
}
