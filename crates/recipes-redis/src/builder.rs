//! [`RedisClientBuilder`]: a client's settings, checked, and its connect.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{Runtime, Settings};
use recipes_core::tls::{check_scheme, Prelude, Probe};
use recipes_core::{Error, LossPolicy, Result, Tls, TlsFiles};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::client::RedisClient;
use crate::replication::{Opening, Replication};
use crate::rpc::{from_redis, Redis};

/// Settings for a [`RedisClient`]; see [`RedisClient::builder`].
#[derive(Clone)]
pub struct RedisClientBuilder {
    pub(crate) url: String,
    pub(crate) replicas: Option<(u32, Duration)>,
    /// A user and password that replace the URL's.
    pub(crate) user: Option<(String, String)>,
    pub(crate) tls: Option<Tls>,
    pub(crate) loss_policy: LossPolicy,
    pub(crate) settings: Settings,
}

impl fmt::Debug for RedisClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClientBuilder")
            .field("url", &shown_url(&self.url))
            .field("replicas", &self.replicas)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .field("loss_policy", &self.loss_policy)
            .field("settings", &self.settings)
            .finish()
    }
}

/// The URL without its password, for messages and logs.
pub(crate) fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return recipes_core::store::quote(url);
    };
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}"),
        None => url.to_owned(),
    }
}

impl RedisClientBuilder {
    recipes_core::settings_setters!(
        ttl = "On Redis the `PX` of the session key, in milliseconds: a hold (a lock's, a \
               permit's) names its session, and is free once that session key expired, \
               not before. One renewal extends it whatever the number held."
    );

    /// Make every acquisition and every fenced write wait for
    /// `WAIT replicas timeout`: an acquisition that fewer replicas
    /// acknowledged is undone and fails, a fenced write fails as
    /// [`Error::Indeterminate`]. Without it a failover to a replica that
    /// had not received the lock or the fence counter loses them: a second
    /// holder, and a fence that repeats (see the guide, "Choosing a
    /// backend: Redis"). Zero replicas turns it off.
    ///
    /// The session's renewals wait for the replicas too: a renewal they
    /// did not acknowledge moves no deadline, so a holder whose replicas
    /// stopped acknowledging loses its locks by its deadline, before a
    /// replica promoted with the older expiry could free them. The waits
    /// run on a connection of their own, one `WAIT` at a time for every
    /// caller queued (a call waits for at most two), so nothing else
    /// queues behind them: `timeout` must be below a third of the TTL
    /// (checked at connect).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// What a lost connection means for the client's guards.
    /// [`LossPolicy::Deadline`] (the default): nothing by itself — a guard
    /// is lost when its local deadline passes without a renewal, or when
    /// the server says its session or lock is gone; a Redis restart that
    /// keeps the data (`appendfsync always`) or a short network blip loses
    /// no lock. [`LossPolicy::OnDisconnect`]: the first request that finds
    /// the connection lost or the server silent past the RPC timeout (a
    /// renewal every TTL/3, the poll of held entries every 500 ms, any
    /// call) fires the loss of every guard of the client, with
    /// [`LossReason::Disconnected`](recipes_core::LossReason), and its
    /// session is revoked once the server answers again; later
    /// acquisitions grant a new session.
    pub fn loss_policy(mut self, policy: LossPolicy) -> Self {
        self.loss_policy = policy;
        self
    }

    /// Log in as `user` (an ACL user; `default` for a server with only
    /// `requirepass`) with `password`, in place of the URL's: for a
    /// password kept out of the URL, read from a file or the environment.
    /// Neither `Debug` nor any message shows the password.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    recipes_core::tls_setter!(
        "A `rediss://` URL needs it; `host:port` then means `rediss://`. Redis's client \
         checks the certificate against the URL's host: a \
         [`Tls::server_name`](recipes_core::Tls::server_name) is refused."
    );

    fn validate(&self) -> Result<(redis::Client, Option<TlsFiles>)> {
        let shown = shown_url(&self.url);
        let refuse = |why: &str| {
            Err(Error::invalid(format!(
                "Redis URL {shown} {why}; write redis://host:port, \
                 redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port/DB \
                 (rediss:// with TLS)"
            )))
        };
        let url = match check_scheme(&self.url, "redis", "rediss", self.tls.is_some()) {
            Ok((_, Some(_))) => self.url.clone(),
            Ok((scheme, None)) if recipes_core::store::is_host_port(&self.url) => {
                format!("{scheme}://{}", self.url)
            }
            Ok((_, None)) => return refuse("is not a URL, nor host:port with a numeric port"),
            Err(why) => return refuse(&why),
        };
        let mut info = match redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
            Ok(info) => info,
            Err(e) => return refuse(&format!("cannot be used ({e})")),
        };
        if let Some((user, password)) = &self.user {
            if user.is_empty() {
                return Err(Error::invalid(
                    "the Redis user is empty; name an ACL user (default for requirepass)",
                ));
            }
            info.redis.username = Some(user.clone());
            info.redis.password = Some(password.clone());
        }
        let files = match &self.tls {
            None => None,
            Some(tls) => {
                tls.refuse_server_name("Redis")?;
                Some(tls.load()?)
            }
        };
        let opened = match &files {
            None => redis::Client::open(info),
            Some(files) => {
                recipes_core::tls::install_provider();
                let client_tls =
                    files
                        .identity_pem
                        .as_ref()
                        .map(|(cert, key)| redis::ClientTlsConfig {
                            client_cert: cert.clone(),
                            client_key: key.clone(),
                        });
                let certs = redis::TlsCertificates {
                    client_tls,
                    root_cert: Some(files.ca_pem.clone()),
                };
                redis::Client::build_with_tls(info, certs)
            }
        };
        let client = match opened {
            Ok(client) => client,
            Err(e) => return refuse(&format!("cannot be used ({e})")),
        };
        match &client.get_connection_info().addr {
            redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. }
                if !host.is_empty() => {}
            _ => return refuse("lacks a host"),
        }
        if let Some((_, wait)) = self.replicas {
            recipes_core::store::check_timeout("replica wait timeout", wait)?;
            if wait >= self.settings.ttl / 3 {
                return Err(Error::invalid(format!(
                    "the replica wait timeout {wait:?} is not below a third of the TTL {:?}: \
                     a renewal counts once replicas acknowledged it, after at most two \
                     WAITs; shorten the wait or lengthen the TTL",
                    self.settings.ttl
                )));
            }
        }
        self.settings.validate("the session TTL")?;
        Ok((client, files))
    }

    /// Connect: start the runtime thread, open the connection, and prove
    /// with a `PING` that the server answers and takes our credentials;
    /// then grant the client's session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad settings, a bad URL, unusable
    /// TLS files, a database index the server does not have, or a
    /// `maxmemory-policy` other than `noeviction`; [`Error::Tls`] when TLS
    /// does not fit the server (a plain client on a TLS port, an unknown
    /// CA, …); [`Error::Backend`] naming the server when it did not answer
    /// within the connect timeout (nothing listening, an address that does
    /// not route); [`Error::Unauthenticated`] when the password is wrong
    /// or missing (`NOAUTH`); [`Error::PermissionDenied`] naming the grant
    /// an ACL user lacks; errors of the session's grant.
    pub fn connect(self) -> Result<RedisClient> {
        let (client, files) = self.validate()?;
        let rt = Runtime::new("recipes-redis")?;
        let timeout = self.settings.connect_timeout;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_number_of_retries(2)
            .set_max_delay(200);
        let (pubsub, shown) = (client.clone(), shown_url(&self.url));
        let what = format!("connect to Redis at {shown}");
        // A plain port waits on a ClientHello, and answers a PING.
        let ping = Prelude::PlainAnswers(b"PING\r\n");
        let probe = Probe::new(&self.url, format!("Redis at {shown}"), files, ping);
        let opening = open(client, config.clone(), probe, what.clone(), timeout);
        let connected = rt.call(&what, timeout, opening);
        let hint = "the URL names a Redis server (port 6379 by default), not a sentinel \
                    (26379), another store or a TLS-only port";
        let conn = match connected {
            Ok(c) => c,
            Err(Error::Timeout { .. } | Error::ConnectionLoss) => {
                let who = format!("no Redis server at {shown}");
                return Err(recipes_core::store::no_server_answered(&who, timeout, hint));
            }
            // Something answered, not as Redis does (an HTTP server, etcd).
            Err(Error::Backend {
                message, source, ..
            }) => {
                return Err(Error::Backend {
                    message: format!(
                        "{message}: check that {hint}, and that the server is up and \
                         reachable from this host"
                    ),
                    retryable: true,
                    source,
                })
            }
            Err(e) => return Err(e),
        };
        log::debug!("[url={shown}] connected to Redis");
        let replication = self.replicas.map(|asked| {
            let opening = Opening {
                client: pubsub.clone(),
                config: config.clone(),
            };
            let rpc_timeout = self.settings.rpc_timeout;
            Replication::start(rt.handle(), opening, asked, rpc_timeout)
        });
        let redis = Redis {
            conn,
            client: pubsub,
            replication,
            dropped: Arc::default(),
        };
        RedisClient::start(self, redis, rt)
    }
}

/// Open the connection and `PING` within `timeout`, a failure explained in
/// TLS terms when TLS is why. A refusal that retrying cannot change (a
/// database index the server lacks, an ACL's, the credentials) is
/// returned as soon as it is known: it passes the probe as a success, so
/// that the probe does not wait on its diagnosis of a server that answered.
async fn open(
    client: redis::Client,
    config: ConnectionManagerConfig,
    probe: Probe,
    what: String,
    timeout: Duration,
) -> Result<ConnectionManager> {
    let failed = |e| probe.error_in(&e).unwrap_or_else(|| from_redis(&what, e));
    let connecting = async {
        let attempt = async {
            let mut conn = ConnectionManager::new_with_config(client, config)
                .await
                .map_err(failed)?;
            let _: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .map_err(failed)?;
            Ok(conn)
        };
        match attempt.await {
            Err(
                e @ (Error::InvalidArgument(_)
                | Error::PermissionDenied { .. }
                | Error::Unauthenticated { .. }),
            ) => Ok(Err(e)),
            other => other.map(Ok),
        }
    };
    probe.connect(&what, timeout, connecting).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(shown_url("redis://:pw@h:1"), "redis://***@h:1");
        assert_eq!(shown_url("redis://u:p@w@h:1/2"), "redis://***@h:1/2");
        assert_eq!(shown_url("redis://h:1"), "redis://h:1");
    }
}
