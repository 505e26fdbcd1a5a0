//! [`EtcdClientBuilder`]: a client's settings, checked, and its connect.

use std::fmt;
use std::time::Duration;

use etcd_client::{ConnectOptions, GetOptions};
use recipes_core::store::{Runtime, Settings, CALL_MARGIN};
use recipes_core::tls::{check_scheme, Prelude::None as NONE, Probe};
use recipes_core::{Error, LossPolicy, Result, Tls, TlsFiles};

use crate::client::EtcdClient;
use crate::rpc::from_etcd;

/// What to check when no member answered.
const UNANSWERED: &str = "each endpoint is an etcd client URL (port 2379 by default), not \
                          ZooKeeper's (2181) or an HTTP/1 server";

/// The key the connect probe reads (keys only, at most one), unused.
const AUTH_PROBE: &str = "\0recipes-connect-probe";

/// HTTP/2 keep-alive: ping interval and the time to wait for the answer.
/// Without it a black-holed connection is never noticed.
const HTTP2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// Settings for an [`EtcdClient`]; see [`EtcdClient::builder`].
#[derive(Clone)]
pub struct EtcdClientBuilder {
    pub(crate) endpoints: Vec<String>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) tls: Option<Tls>,
    pub(crate) settings: Settings,
}

impl fmt::Debug for EtcdClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
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

    /// What a dropped connection means for the locks the client holds
    /// (default [`LossPolicy::Deadline`]), as on ZooKeeper:
    /// [`Deadline`](LossPolicy::Deadline) rides out a disconnect shorter
    /// than the lease's deadline (a member restarting, a leader election),
    /// and a lock is lost only when its deadline passes without a
    /// keep-alive answered, or the store says it is gone;
    /// [`OnDisconnect`](LossPolicy::OnDisconnect) makes a broken keep-alive
    /// stream (a member gone, a keep-alive unanswered for an RPC timeout)
    /// loss at once ([`LossReason::Disconnected`](recipes_core::LossReason)),
    /// and revokes the lease so that its keys go as soon as etcd answers.
    pub fn loss_policy(mut self, policy: LossPolicy) -> Self {
        self.settings.loss_policy = policy;
        self
    }

    /// Authenticate as `user` with `password`.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    recipes_core::tls_setter!("`https://` endpoints need it; `host:port` then means `https://`.");

    /// The endpoints with their scheme, the TLS files read.
    fn validate(&self) -> Result<(Vec<String>, Option<TlsFiles>)> {
        if self.endpoints.is_empty() {
            return Err(Error::invalid(
                "no etcd endpoints: give at least one host:port",
            ));
        }
        let tls = self.tls.is_some();
        let check = |e: &String| check_endpoint(e, tls);
        let endpoints = self.endpoints.iter().map(check).collect::<Result<_>>()?;
        self.settings.validate("the lease TTL")?;
        Ok((endpoints, self.tls.as_ref().map(Tls::load).transpose()?))
    }

    /// Connect: start the runtime thread, open the channel, make one round
    /// trip to prove a member answers, and grant the client's lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings or TLS files;
    /// [`Error::Tls`] when TLS does not fit the server; [`Error::Backend`]
    /// naming the endpoints when no member answered within the connect
    /// timeout; [`Error::Unauthenticated`] when etcd has authentication on
    /// and the user or password is wrong; errors of the lease grant.
    pub fn connect(self) -> Result<EtcdClient> {
        let (endpoints, files) = self.validate()?;
        let rt = Runtime::new("recipes-etcd")?;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.settings.connect_timeout)
            .with_keep_alive(HTTP2_KEEP_ALIVE.0, HTTP2_KEEP_ALIVE.1)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        let options = with_tls(options, files.as_ref());
        let timeout = self.settings.connect_timeout;
        let listed = endpoints.join(",");
        let probe = Probe::new(&endpoints[0], format!("etcd at {listed}"), files, NONE)
            .unanswered(format!("no etcd member of {listed}"), UNANSWERED);
        // The probe answers within the timeout: the margin lets it.
        let client = rt.call("connect to etcd", timeout + CALL_MARGIN, async move {
            let what = format!("connect to {}", probe.target);
            let failed = |e| probe.error_in(&e).unwrap_or_else(|| from_etcd(&what, e));
            let connecting = async {
                let mut client = etcd_client::Client::connect(&endpoints, Some(options))
                    .await
                    .map_err(failed)?;
                client.status().await.map_err(failed)?;
                // A read proves the credentials: with authentication on,
                // etcd refuses a client without a user only at its first
                // key. A user whose roles do not cover it is authenticated.
                let probe = GetOptions::new().with_keys_only().with_limit(1);
                match client.get(AUTH_PROBE, Some(probe)).await.map_err(failed) {
                    Ok(_) | Err(Error::PermissionDenied { .. }) => Ok(client),
                    Err(e) => Err(e),
                }
            };
            probe.connect(&what, timeout, connecting).await
        })?;
        log::debug!("[endpoints={}] connected to etcd", self.endpoints.join(","));
        EtcdClient::start(self, client, rt)
    }
}

/// `options` with the TLS of `files`, when given.
fn with_tls(options: ConnectOptions, files: Option<&TlsFiles>) -> ConnectOptions {
    let Some(files) = files else { return options };
    recipes_core::tls::install_provider();
    let mut tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(&files.ca_pem));
    if let Some((cert, key)) = &files.identity_pem {
        tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
    }
    let name = files.tls.server_name_override();
    options.with_tls(name.map_or(tls.clone(), |n| tls.domain_name(n)))
}

/// One endpoint, `host:port` (a numeric port) or `http://host:port`
/// (`https://` with TLS), with its scheme; or what to write.
fn check_endpoint(endpoint: &str, tls: bool) -> Result<String> {
    let refuse = |why: &str| {
        Error::invalid(format!(
            "etcd endpoint {} {why}; write host:port, http://host:port or, with TLS, \
             https://host:port, such as 127.0.0.1:2379",
            recipes_core::store::quote(endpoint)
        ))
    };
    let (scheme, address) = check_scheme(endpoint, "http", "https", tls).map_err(|w| refuse(&w))?;
    match address.unwrap_or(endpoint) {
        _ if endpoint.contains(',') => Err(refuse("holds a comma (give one endpoint per item)")),
        a if recipes_core::store::is_host_port(a) => Ok(format!("{scheme}://{a}")),
        _ => Err(refuse("is empty or lacks a host or a numeric port")),
    }
}
