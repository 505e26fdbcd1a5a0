//! The ZooKeeper client: one session on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_core::{Error, LossPolicy, Result, Runtime};
use zookeeper_client as zk;

use crate::error::from_zk;

/// The default requested session timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time allowed to establish the first session.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default deadline of one request.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for a [`ZkClient`]; see [`ZkClient::builder`].
#[derive(Debug, Clone)]
pub struct ZkClientBuilder {
    hosts: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    loss_policy: LossPolicy,
}

impl ZkClientBuilder {
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

    fn validate(&self) -> Result<()> {
        let hosts: Vec<&str> = self.hosts.split(',').map(str::trim).collect();
        if self.hosts.trim().is_empty() || hosts.iter().any(|h| h.is_empty()) {
            return Err(Error::invalid(format!(
                "ZooKeeper connect string {:?} has an empty host; give host:port[,host:port…]",
                self.hosts
            )));
        }
        for (what, d) in [
            ("session timeout", self.session_timeout),
            ("connect timeout", self.connect_timeout),
            ("rpc timeout", self.rpc_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(format!("the {what} must be more than zero")));
            }
            if d > Duration::from_secs(24 * 3600) {
                return Err(Error::invalid(format!(
                    "the {what} of {d:?} is absurd; use at most a day"
                )));
            }
        }
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
        let connector = zk::Client::connector()
            .with_session_timeout(self.session_timeout)
            .with_connection_timeout(self.connect_timeout.min(self.session_timeout));
        let hosts = self.hosts.clone();
        let connect_timeout = self.connect_timeout;
        let connected = rt.call("connect to ZooKeeper", connect_timeout, async move {
            connector
                .connect(&hosts)
                .await
                .map_err(|e| from_zk(&format!("connect to ZooKeeper at {hosts}"), e))
        });
        let client = match connected {
            Ok(c) => c,
            Err(Error::Timeout { after, .. }) => {
                return Err(Error::Backend {
                    message: format!(
                        "no ZooKeeper session with any of {} within {after:?}",
                        self.hosts
                    ),
                    retryable: true,
                    source: None,
                })
            }
            Err(e) => return Err(e),
        };
        log::debug!(
            "[hosts={}] ZooKeeper session {:#x} established, timeout {:?}",
            self.hosts,
            client.session_id().0,
            client.session_timeout()
        );
        Ok(ZkClient {
            inner: Arc::new(Inner {
                session_timeout: client.session_timeout(),
                session_id: client.session_id().0,
                client: parking_lot::Mutex::new(Some(client)),
                rt,
                settings: self,
            }),
        })
    }
}

struct Inner {
    // zookeeper-client sends CloseSession when its last handle is dropped;
    // `close` takes this one out. Dropped with the runtime entered (it needs
    // it).
    client: parking_lot::Mutex<Option<zk::Client>>,
    session_timeout: Duration,
    session_id: i64,
    rt: Runtime,
    settings: ZkClientBuilder,
}

impl Inner {
    fn zk(&self) -> Result<zk::Client> {
        self.client.lock().clone().ok_or(Error::Closed)
    }

    fn take_client(&self) -> Option<zk::Client> {
        self.client.lock().take()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(client) = self.take_client() {
            let _enter = self.rt.enter();
            drop(client);
        }
    }
}

/// A ZooKeeper client: one session, kept alive on its own runtime thread.
///
/// Cheap to clone; the session closes when the last clone (and every guard
/// made from it) is dropped, or at [`close`](ZkClient::close).
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
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            loss_policy: LossPolicy::default(),
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

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The session id.
    pub fn session_id(&self) -> i64 {
        self.inner.session_id
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
        let zk = self.inner.zk()?;
        let started = Instant::now();
        self.call("ping", async move {
            zk.check_stat("/").await.map_err(|e| from_zk("ping", e))?;
            Ok(started.elapsed())
        })
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.inner.rt.call(what, self.inner.settings.rpc_timeout, fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// Close the session and stop the runtime thread, waiting for pending
    /// background releases for up to `grace`. Fires every loss signal.
    ///
    /// Other clones of this client stop working too.
    pub fn close(&self, grace: Duration) {
        // A closed session deletes its ephemeral nodes at once rather than
        // after the session timeout. The close request goes out when the last
        // handle is gone; wait (up to `grace`) until the session says so.
        if let Some(client) = self.inner.take_client() {
            let mut states = client.state_watcher();
            {
                let _enter = self.inner.rt.enter();
                drop(client);
            }
            let _ = self.inner.rt.call("close the session", grace, async move {
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
        self.inner.rt.shutdown(grace);
    }
}

impl fmt::Debug for ZkClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkClient")
            .field("hosts", &self.inner.settings.hosts)
            .field("session_id", &format_args!("{:#x}", self.session_id()))
            .field("session_timeout", &self.session_timeout())
            .finish()
    }
}
