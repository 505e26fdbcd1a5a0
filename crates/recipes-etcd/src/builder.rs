//! [`EtcdClientBuilder`]: a client's settings, checked, and its connect.

use std::fmt;
use std::time::Duration;

use recipes_core::{Error, Result, Runtime};

use crate::client::EtcdClient;
use crate::rpc::from_etcd;

/// HTTP/2 keep-alive: ping interval and the time to wait for the answer.
/// Without it a black-holed connection is never noticed.
const HTTP2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// Settings for an [`EtcdClient`]; see [`EtcdClient::builder`].
#[derive(Clone)]
pub struct EtcdClientBuilder {
    pub(crate) endpoints: Vec<String>,
    pub(crate) rpc_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) user: Option<(String, String)>,
    pub(crate) ttl: Duration,
    pub(crate) lease_slack: Duration,
}

impl fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("ttl", &self.ttl)
            .field("lease_slack", &self.lease_slack)
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

    /// The TTL of the client's lease (default [`DEFAULT_TTL`](recipes_core::DEFAULT_TTL)), rounded up
    /// to whole seconds; pooled leases (see [`EtcdClient`]) ask for the
    /// same. Every lock of the client lives on such a lease: a
    /// holder that stops renewing it (a crash, a partition, a pause) blocks
    /// others for at most about this long, and its guards report the loss
    /// before the server can give the lock away. etcd silently raises a TTL
    /// below its minimum (ceil(1.5 × election timeout), 2 s at defaults);
    /// [`EtcdClient::session_ttl`] reports what was granted.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Scheduling slack subtracted from every lease deadline on top of the
    /// clock-drift margin (default [`DEFAULT_SLACK`](recipes_core::DEFAULT_SLACK)).
    pub fn lease_slack(mut self, slack: Duration) -> Self {
        self.lease_slack = slack;
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
        if let Some(bad) = self
            .endpoints
            .iter()
            .find(|e| e.trim().is_empty() || e.contains(','))
        {
            return Err(Error::invalid(format!(
                "etcd endpoint {bad:?} is empty or holds a comma; give one host:port per endpoint"
            )));
        }
        recipes_core::check_ttl(self.ttl)?;
        recipes_core::check_timeout("connect timeout", self.connect_timeout)?;
        recipes_core::check_timeout("rpc timeout", self.rpc_timeout)?;
        recipes_core::check_lease("the lease TTL", self.ttl, self.lease_slack)
    }

    /// Connect: start the runtime thread, open the channel, make one round
    /// trip to prove a member answers, and grant the client's lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Backend`]
    /// naming the endpoints when no member answered within the connect
    /// timeout; errors of the lease grant.
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
        EtcdClient::start(self, client, rt)
    }
}
