//! The etcd client: one connection pool on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_core::{Error, Result, Runtime};

use crate::error::from_etcd;

/// The default deadline of one request.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(5);
/// The default time allowed to reach a member at connect.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keep-alive: ping interval and the time to wait for the answer.
/// Without it a black-holed connection is never noticed.
pub const HTTP2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// Settings for an [`EtcdClient`]; see [`EtcdClient::builder`].
#[derive(Clone)]
pub struct EtcdClientBuilder {
    endpoints: Vec<String>,
    rpc_timeout: Duration,
    connect_timeout: Duration,
    user: Option<(String, String)>,
}

impl fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl EtcdClientBuilder {
    /// The deadline of each request. Applied per call, never as
    /// etcd-client's client-wide timeout, which would also cut off blocking
    /// calls such as watches.
    pub fn rpc_timeout(mut self, timeout: Duration) -> Self {
        self.rpc_timeout = timeout;
        self
    }

    /// How long [`connect`](EtcdClientBuilder::connect) may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Authenticate as `user` with `password`.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::invalid(
                "no etcd endpoints given; give at least one host:port",
            ));
        }
        if let Some(bad) = self.endpoints.iter().find(|e| e.trim().is_empty() || e.contains(',')) {
            return Err(Error::invalid(format!(
                "etcd endpoint {bad:?} is empty or holds a comma; give one host:port per endpoint"
            )));
        }
        for (what, d) in [
            ("rpc timeout", self.rpc_timeout),
            ("connect timeout", self.connect_timeout),
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

    /// Connect: start the runtime thread, open the channel and make one
    /// round trip to prove a member answers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Backend`]
    /// naming the endpoints when no member answered within the connect
    /// timeout.
    pub fn connect(self) -> Result<EtcdClient> {
        self.validate()?;
        let rt = Runtime::new("recipes-etcd")?;
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(HTTP2_KEEP_ALIVE.0, HTTP2_KEEP_ALIVE.1)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let endpoints = self.endpoints.clone();
        let connected = rt.call("connect to etcd", self.connect_timeout, async move {
            let what = format!("connect to etcd at {}", endpoints.join(","));
            let mut client = etcd_client::Client::connect(&endpoints, Some(options))
                .await
                .map_err(|e| from_etcd(&what, e))?;
            client.status().await.map_err(|e| from_etcd(&what, e))?;
            Ok(client)
        });
        let client = match connected {
            Ok(c) => c,
            Err(Error::Timeout { .. } | Error::ConnectionLoss) => {
                return Err(Error::Backend {
                    message: format!(
                        "no etcd member of {} answered within {:?}",
                        self.endpoints.join(","),
                        self.connect_timeout
                    ),
                    retryable: true,
                    source: None,
                })
            }
            Err(e) => return Err(e),
        };
        log::debug!("[endpoints={}] connected to etcd", self.endpoints.join(","));
        Ok(EtcdClient {
            inner: Arc::new(Inner {
                client: parking_lot::Mutex::new(Some(client)),
                rt,
                settings: self,
            }),
        })
    }
}

struct Inner {
    // Dropped with the runtime entered: tonic's channel needs it.
    client: parking_lot::Mutex<Option<etcd_client::Client>>,
    rt: Runtime,
    settings: EtcdClientBuilder,
}

impl Inner {
    fn etcd(&self) -> Result<etcd_client::Client> {
        self.client.lock().clone().ok_or(Error::Closed)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(client) = self.client.lock().take() {
            let _enter = self.rt.enter();
            drop(client);
        }
    }
}

/// An etcd client on its own runtime thread.
///
/// Cheap to clone; it closes when the last clone (and every guard made from
/// it) is dropped, or at [`close`](EtcdClient::close).
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
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user: None,
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

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.settings.endpoints
    }

    /// One round trip to a member (a status request); returns how long it
    /// took.
    ///
    /// # Errors
    ///
    /// Connection errors; [`Error::Timeout`] after the RPC timeout.
    pub fn ping(&self) -> Result<Duration> {
        let mut etcd = self.inner.etcd()?;
        let started = Instant::now();
        self.call("ping", async move {
            etcd.status().await.map_err(|e| from_etcd("ping", e))?;
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

    /// Stop the runtime thread, waiting for pending background releases for
    /// up to `grace`. Fires every loss signal. Other clones stop working too.
    pub fn close(&self, grace: Duration) {
        if let Some(client) = self.inner.client.lock().take() {
            let _enter = self.inner.rt.enter();
            drop(client);
        }
        self.inner.rt.shutdown(grace);
    }
}

impl fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.settings.endpoints)
            .finish()
    }
}
