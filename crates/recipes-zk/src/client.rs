//! The ZooKeeper client: one session on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use recipes_core::store::{Runtime, Settings};
use recipes_core::tls::{Prelude, Probe};
use recipes_core::{Error, LossPolicy, LossReason, Result};
use zookeeper_client as zk;

use crate::error::from_zk;
use crate::session::{Session, SessionState};

/// Settings for a [`ZkClient`]; see [`ZkClient::builder`].
#[derive(Clone)]
pub struct ZkClientBuilder {
    hosts: String,
    settings: Settings,
    loss_policy: LossPolicy,
    chroot: Option<String>,
    digest: Option<(String, String)>,
    sasl: Option<(String, String)>,
    tls: Option<recipes_core::Tls>,
}

impl fmt::Debug for ZkClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClientBuilder")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("settings", &self.settings)
            .field("loss_policy", &self.loss_policy)
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .field("sasl_user", &self.sasl.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ZkClientBuilder {
    recipes_core::settings_setters!(
        ttl = "On ZooKeeper the session timeout: the server clamps it to its \
               `[minSessionTimeout, maxSessionTimeout]`; [`ZkClient::session_timeout`] \
               reports what was granted. A grant below the asked timeout (a \
               `maxSessionTimeout` below it) is refused at connect with \
               [`Error::InvalidArgument`]: a holder would lose its lock sooner than \
               it planned for."
    );

    /// The session timeout to ask for: the same setting as
    /// [`ttl`](ZkClientBuilder::ttl).
    pub fn session_timeout(self, timeout: Duration) -> Self {
        self.ttl(timeout)
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

    /// Authenticate with SASL DIGEST-MD5 as `user`, a user of the server's
    /// JAAS `Server` section (`user_<name>="<password>"` of ZooKeeper's
    /// `DigestLoginModule`). Unlike a digest identity, a wrong password
    /// fails at connect ([`Error::Unauthenticated`]). Nodes get the same
    /// ACL as with [`digest_auth`](Self::digest_auth): full rights for the
    /// identity `sasl:<user>`, read for anyone.
    pub fn sasl_digest(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl = Some((user.into(), password.into()));
        self
    }
    recipes_core::tls_setter!(
        "Give the servers' secure client ports (`secureClientPort`). ZooKeeper's client \
         checks the certificate against the host it connects to: a \
         [`Tls::server_name`](recipes_core::Tls::server_name) is refused."
    );

    fn acls(&self) -> zk::Acls<'static> {
        static CREATOR_ALL_ANYONE_READ: [zk::Acl; 2] = [
            zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
            zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
        ];
        match (&self.digest, &self.sasl) {
            (None, None) => zk::Acls::anyone_all(),
            _ => zk::Acls::new(&CREATOR_ALL_ANYONE_READ),
        }
    }

    fn validate(&self) -> Result<()> {
        let shown = recipes_core::store::quote(&self.hosts);
        let refuse = |why: &str| {
            Err(Error::invalid(format!(
                "ZooKeeper connect string {shown} {why}; give host:port[,host:port…][/chroot]"
            )))
        };
        if self.hosts.contains("://") {
            return refuse("is a URL");
        }
        for host in self.hosts.split(',').map(str::trim) {
            match host {
                "" => return refuse("has an empty host"),
                _ if recipes_core::store::is_host_port(host) => {}
                _ => {
                    return refuse(&format!(
                        "has {}, not host:port",
                        recipes_core::store::quote(host)
                    ))
                }
            }
        }
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
        if self.sasl.as_ref().is_some_and(|(user, _)| user.is_empty()) {
            return Err(Error::invalid(
                "the SASL user is empty; name a user of the server's JAAS",
            ));
        }
        self.settings.validate("the session timeout")
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
        let files = match &self.tls {
            None => None,
            Some(tls) => {
                tls.refuse_server_name("ZooKeeper")?;
                Some(tls.load()?)
            }
        };
        let target = format!("ZooKeeper at {}", self.hosts);
        let first = self.hosts.split(',').next().unwrap_or_default();
        let probe = Probe::new(first, target, files, Prelude::None).unanswered(
            format!("no ZooKeeper server of {}", self.hosts),
            "each host:port is a ZooKeeper client port (2181 by default; its \
             secureClientPort with TLS), not etcd's (2379) or an HTTP server",
        );
        let rt = Runtime::new("recipes-zk")?;
        let inner = Arc::new(Inner {
            session: parking_lot::Mutex::new(None),
            rt,
            config: self,
            probe,
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

/// The client crate's TLS options of `files`.
fn tls_options(files: &recipes_core::TlsFiles) -> Result<zk::TlsOptions> {
    recipes_core::tls::install_provider();
    let text = |pem: &[u8]| String::from_utf8_lossy(pem).into_owned();
    let refused = |e: zk::Error| Error::invalid(format!("TLS files refused: {e}"));
    let mut options = zk::TlsOptions::new()
        .with_pem_ca(&text(&files.ca_pem))
        .map_err(refused)?;
    if let Some((cert, key)) = &files.identity_pem {
        options = options
            .with_pem_identity(&text(cert), &text(key))
            .map_err(refused)?;
    }
    Ok(options)
}

struct Inner {
    // The current session; replaced by a new one after expiry. zookeeper-
    // client sends CloseSession when the last handle of a session is gone:
    // dropped before the runtime (fields drop in order), which sends it.
    session: parking_lot::Mutex<Option<Arc<Session>>>,
    rt: Runtime,
    config: ZkClientBuilder,
    /// What explains a failed connect; its files are the TLS ones.
    probe: Probe,
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
        let hosts = self.config.hosts.clone();
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.config.settings.ttl)
            .with_connection_timeout(self.config.settings.connect_timeout);
        if let Some((user, password)) = &self.config.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        if let Some((user, password)) = self.config.sasl.clone() {
            connector = connector.with_sasl(zk::SaslOptions::digest_md5(user, password));
        }
        if let Some(files) = &self.probe.files {
            connector = connector.with_tls(tls_options(files)?);
        }
        let sent_at = recipes_core::BootInstant::now();
        let (what, timeout) = (
            format!("connect to ZooKeeper at {hosts}"),
            self.config.settings.connect_timeout,
        );
        let connecting = async {
            let connected = match self.probe.files {
                None => connector.connect(&hosts).await,
                Some(_) => connector.secure_connect(&hosts).await,
            };
            connected.map_err(|e| match e {
                zk::Error::Timeout => Error::Timeout {
                    what: what.clone(),
                    after: timeout,
                },
                e => self.probe.error_in(&e).unwrap_or_else(|| from_zk(&what, e)),
            })
        };
        let zk = self.probe.connect(&what, timeout, connecting).await?;
        // The server may grant less than asked (its maxSessionTimeout); an
        // unusable grant would make every acquisition lost at once. Dropping
        // `zk` closes the session.
        recipes_core::store::check_lease(
            "the session timeout the server granted",
            zk.session_timeout(),
            self.config.settings.lease_slack,
        )?;
        // Less than asked (a maxSessionTimeout below it) is refused too:
        // a holder would lose its lock sooner than it planned for.
        if let Some(hazard) = recipes_core::store::granted_ttl_hazard(
            "ZooKeeper",
            self.config.settings.ttl,
            zk.session_timeout(),
        ) {
            return Err(Error::invalid(hazard));
        }
        let zk = match &self.config.chroot {
            None => zk,
            Some(chroot) => {
                // Like Curator's namespace: make the root if it is missing.
                let options = zk::CreateMode::Persistent.with_acls(self.config.acls());
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
            self.config.acls(),
            sent_at,
            self.config.loss_policy,
            self.config.settings.lease_slack,
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

/// A ZooKeeper client: one session, kept alive on its own runtime thread.
///
/// Cheap to clone; the session closes when the last clone (and every guard
/// made from it) is dropped, or at [`close`](recipes_core::Client::close),
/// which ends it while guards live: they are lost (`Closed`).
///
/// # Under pause and partition
///
/// A heartbeat every `timeout / 4` keeps the local lease deadline
/// ([`valid_until`](recipes_core::Client::valid_until)); guards are lost when it passes.
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
    ///
    /// A chroot suffix (`host:port/app`) is the same as
    /// [`chroot`](ZkClientBuilder::chroot), which replaces it.
    pub fn builder(hosts: impl Into<String>) -> ZkClientBuilder {
        let mut hosts = hosts.into();
        // ZooKeeper's chroot suffix starts at the first '/' (not in a URL,
        // which `validate` refuses).
        let chroot = match hosts.find('/') {
            Some(at) if !hosts.contains("://") => Some(hosts.split_off(at)),
            _ => None,
        };
        ZkClientBuilder {
            hosts,
            settings: Settings::default(),
            loss_policy: LossPolicy::default(),
            chroot: chroot.filter(|c| c != "/"),
            digest: None,
            sasl: None,
            tls: None,
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

    /// The current session's state.
    pub fn session_state(&self) -> SessionState {
        self.inner
            .current()
            .map(|s| s.state())
            .unwrap_or(SessionState::Closed)
    }

    /// The loss policy.
    pub fn loss_policy(&self) -> LossPolicy {
        self.inner.config.loss_policy
    }

    /// The connect string.
    pub fn hosts(&self) -> &str {
        &self.inner.config.hosts
    }

    /// The current session (also when expired), unless closed.
    pub(crate) fn current(&self) -> Option<Arc<Session>> {
        self.inner.current().ok()
    }

    /// The current session, or a new one after expiry (on the runtime).
    pub(crate) async fn live_session(&self) -> Result<Arc<Session>> {
        self.inner.session().await
    }

    /// The deadline of one request.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.inner.config.settings.rpc_timeout
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

    /// [`Client::close_within`](recipes_core::Client::close_within): a
    /// closed session deletes its ephemeral nodes at once; an acquisition
    /// another thread waits in returns [`Error::Closed`].
    pub(crate) fn close_within(&self, grace: Duration) -> Result<()> {
        // One budget for every step.
        let until = recipes_core::store::deadline_in(grace);
        self.inner.closed.store(true, Ordering::SeqCst);
        // A closed session deletes its ephemeral nodes at once rather than
        // after the session timeout. The close request goes out when the last
        // handle is gone; wait (up to `grace`) until the session says so.
        let mut closed = Ok(());
        // Taken out first: the lock must not be held across the call
        // below, which may wait for a runtime task (a reconnect) that
        // locks it.
        let taken = self.inner.session.lock().take();
        if let Some(session) = taken {
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
                let mut state = states.state();
                while !state.is_terminated() {
                    state = states.changed().await;
                }
                Ok(())
            });
        }
        self.inner
            .rt
            .shutdown(until.saturating_duration_since(Instant::now()));
        closed
    }
}

impl fmt::Debug for ZkClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClient")
            .field("hosts", &self.inner.config.hosts)
            .field(
                "session_id",
                &self.current().map(|s| format!("{:#x}", s.id())),
            )
            .field("state", &self.session_state())
            .field("session_timeout", &self.session_timeout())
            .finish()
    }
}
