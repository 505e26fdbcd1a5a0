//! [`EtcdClientBuilder`]: a client's settings, checked, and its connect.

use std::fmt;
use std::time::Duration;

use etcd_client::GetOptions;
use recipes_core::{Error, Result, Runtime, Settings};

use crate::client::EtcdClient;
use crate::rpc::from_etcd;

/// The key the connect probe reads (keys only, at most one): one no
/// recipe writes.
const AUTH_PROBE: &str = "\0recipes-connect-probe";

/// HTTP/2 keep-alive: ping interval and the time to wait for the answer.
/// Without it a black-holed connection is never noticed.
const HTTP2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// Settings for an [`EtcdClient`]; see [`EtcdClient::builder`].
#[derive(Clone)]
pub struct EtcdClientBuilder {
    pub(crate) endpoints: Vec<String>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) settings: Settings,
}

impl fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("settings", &self.settings)
            .finish()
    }
}

impl EtcdClientBuilder {
    recipes_core::settings_setters!(
        ttl = "On etcd the lease TTL, rounded up to whole seconds; single-use leases (see \
               [`EtcdClient`]) ask for the same. etcd silently raises a TTL below its \
               minimum (ceil(1.5 × election timeout), 2 s at defaults); \
               [`Client::granted_ttl`](recipes_core::Client::granted_ttl) reports what was granted. Requests are timed \
               one by one, never with etcd-client's client-wide timeout, which would also \
               cut off watches."
    );

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
        self.endpoints.iter().try_for_each(|e| check_endpoint(e))?;
        self.settings.validate("the lease TTL")
    }

    /// Connect: start the runtime thread, open the channel, make one round
    /// trip to prove a member answers, and grant the client's lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Backend`]
    /// naming the endpoints when no member answered within the connect
    /// timeout; [`Error::Unauthenticated`] when etcd has authentication on
    /// and the user or password is missing or wrong; errors of the lease
    /// grant.
    pub fn connect(self) -> Result<EtcdClient> {
        self.validate()?;
        let rt = Runtime::new("recipes-etcd")?;
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.settings.connect_timeout)
            .with_keep_alive(HTTP2_KEEP_ALIVE.0, HTTP2_KEEP_ALIVE.1)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let endpoints = self.endpoints.clone();
        let connected = rt.call(
            "connect to etcd",
            self.settings.connect_timeout,
            async move {
                let what = format!("connect to etcd at {}", endpoints.join(","));
                let mut client = etcd_client::Client::connect(&endpoints, Some(options))
                    .await
                    .map_err(|e| from_etcd(&what, e))?;
                client.status().await.map_err(|e| from_etcd(&what, e))?;
                // A read proves the credentials: with authentication on,
                // etcd answers status and grants leases to anyone, and
                // refuses a client without a user only at its first key.
                // A user whose roles do not cover this key is still
                // authenticated.
                let probe = GetOptions::new().with_keys_only().with_limit(1);
                match client
                    .get(AUTH_PROBE, Some(probe))
                    .await
                    .map_err(|e| from_etcd(&what, e))
                {
                    Ok(_) | Err(Error::PermissionDenied { .. }) => Ok(client),
                    Err(e) => Err(e),
                }
            },
        );
        let client = match connected {
            Ok(c) => c,
            Err(Error::Timeout { .. } | Error::ConnectionLoss) => {
                return Err(recipes_core::no_server_answered(
                    &format!("no etcd member of {}", self.endpoints.join(",")),
                    self.settings.connect_timeout,
                    "each endpoint is an etcd client URL (port 2379 by default), not \
                     ZooKeeper's (2181), an HTTP/1 server or a TLS-only port",
                ))
            }
            Err(e) => return Err(e),
        };
        log::debug!("[endpoints={}] connected to etcd", self.endpoints.join(","));
        EtcdClient::start(self, client, rt)
    }
}

/// One endpoint is `host:port` (a numeric port) or `http://host:port`;
/// the message names the endpoint and says what to write.
fn check_endpoint(endpoint: &str) -> Result<()> {
    let shown = recipes_core::quote(endpoint);
    let refuse = |why: String| {
        Err(Error::invalid(format!(
            "etcd endpoint {shown} {why}; write host:port or http://host:port, \
             such as 127.0.0.1:2379"
        )))
    };
    if endpoint.trim().is_empty() || endpoint.contains(',') {
        return refuse("is empty or holds a comma (give one endpoint per item)".into());
    }
    let address = match endpoint.split_once("://") {
        None => endpoint,
        Some(("http", address)) => address,
        Some(("https", _)) => {
            return refuse("asks for TLS, which this client does not support yet".into())
        }
        Some((scheme, _)) => return refuse(format!("has the scheme {scheme}://, not http://")),
    };
    match recipes_core::is_host_port(address) {
        true => Ok(()),
        false => refuse("lacks a host or a numeric port".into()),
    }
}
