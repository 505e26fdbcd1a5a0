//! The Redis client: one connection on its own runtime thread.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use recipes_core::store::{LeaseSessions, PresencePoll, Runtime, Settings};
use recipes_core::{LossPolicy, LossReason, Result};
use tokio::sync::Notify;

use crate::builder::{shown_url, RedisClientBuilder};
use crate::contend::POLL;
use crate::rpc::Redis;
use crate::session::Sessions;

/// Hold keys per `MGET` of the poll of held entries: ten times core's
/// batch: an `MGET` of 10,000 hold keys takes Redis's one thread about
/// 1.4 ms (measured, 2-core machine), the same work as ten of 1,000 but
/// one command, so a client's idle commands stay flat up to 10,000 held
/// (one `MGET` a poll), and no single `MGET` blocks the server longer
/// beyond that.
const HELD_BATCH: usize = 10 * recipes_core::store::PRESENCE_BATCH;

/// A client of one Redis server on its own runtime thread, holding one
/// session (a key renewed every TTL/3) that its recipes' entries live on;
/// see [`recipes_core::Client`] for what it does.
///
/// One session serves every lock, election and semaphore of the client,
/// and any number of acquisitions of one name: entries are named by a
/// fresh uuid. An uncontended acquire is two scripts (enter, confirm), a
/// release one.
///
/// Cheap to clone; it closes when the last clone (and every guard made from
/// it) is dropped, or at [`close`](recipes_core::Client::close), which
/// revokes its session, so its locks are free at once.
///
/// While no renewal is acknowledged (a partition, a paused process, a
/// stopped server) the local deadline
/// ([`valid_until`](recipes_core::Client::valid_until)) is not renewed,
/// and when it passes every guard of the session is lost. Not guaranteed:
/// that Redis keeps the keys as long as we assume — a restart without
/// persistence, or a failover to a replica that had not received them,
/// loses them (see the crate's documentation); a held entry is polled, so
/// that shows as loss too.
#[derive(Clone)]
pub struct RedisClient {
    leases: Arc<LeaseSessions<Sessions>>,
    url: Arc<str>,
    /// The one poll of every entry the client holds: hold keys and the
    /// members they must hold.
    held: PresencePoll<(String, String)>,
    loss_policy: LossPolicy,
}

impl RedisClient {
    /// The one poll of every entry the client holds.
    pub(crate) fn held_poll(&self) -> &PresencePoll<(String, String)> {
        &self.held
    }

    /// Settings for a client of the server at `url`: `redis://host:port`
    /// (port 6379 if left out), with `:PASSWORD@` or `USER:PASSWORD@`
    /// before the host when the server wants them and `/DB` after it; or
    /// plain `host:port`.
    pub fn builder(url: impl Into<String>) -> RedisClientBuilder {
        RedisClientBuilder {
            url: url.into(),
            replicas: None,
            user: None,
            tls: None,
            loss_policy: LossPolicy::default(),
            settings: Settings::default(),
        }
    }

    /// Connect with default settings.
    ///
    /// # Errors
    ///
    /// As for [`RedisClientBuilder::connect`].
    pub fn connect(url: impl Into<String>) -> Result<RedisClient> {
        RedisClient::builder(url).connect()
    }

    /// A client of the connected `redis`, with its first session granted.
    pub(crate) fn start(
        config: RedisClientBuilder,
        redis: Redis,
        rt: Runtime,
    ) -> Result<RedisClient> {
        let (polled, timeout) = (redis.clone(), config.settings.rpc_timeout);
        let (config_policy, dropped) = (config.loss_policy, redis.dropped.clone());
        let held = PresencePoll::new(POLL, move |held| {
            let redis = polled.clone();
            async move { redis.holding(held, timeout).await }
        })
        .with_batch(HELD_BATCH);
        let url: Arc<str> = shown_url(&config.url).into();
        let client = RedisClient {
            held,
            leases: Arc::new(LeaseSessions::new(
                Sessions::new(redis, url.clone()),
                rt,
                config.settings,
            )),
            url,
            loss_policy: config_policy,
        };
        if config_policy == LossPolicy::OnDisconnect {
            lose_on_disconnect(&client.leases, dropped);
        }
        let leases = client.leases.clone();
        client.call("grant the client's session", async move {
            leases.primary().await.map(drop)
        })?;
        Ok(client)
    }

    /// The deadline of one request.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.leases.settings().rpc_timeout
    }

    /// The loss policy (see [`RedisClientBuilder::loss_policy`]).
    pub fn loss_policy(&self) -> LossPolicy {
        self.loss_policy
    }

    /// Whether the current session is lost: its deadline passed, the
    /// server said it is gone, or it was orphaned or revoked. The next
    /// acquisition then grants a new session.
    pub fn is_session_lost(&self) -> bool {
        self.leases.is_lost()
    }

    /// Stop renewing the current session without revoking it, as a crashed
    /// process would: Redis expires its keys when the TTL runs out, and
    /// guards held on it fire their loss signal at their local deadline
    /// (before that). Later acquisitions grant a new session.
    pub fn orphan(&self) {
        self.leases.orphan();
    }

    /// The client's sessions.
    pub(crate) fn leases(&self) -> &LeaseSessions<Sessions> {
        &self.leases
    }

    /// The connection, unless closed.
    pub(crate) fn redis(&self) -> Result<Redis> {
        Ok(self.leases.store()?.redis)
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.runtime().call(what, self.rpc_timeout(), fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        self.leases.runtime()
    }
}

/// Under [`LossPolicy::OnDisconnect`]: each time a request finds the
/// connection lost, end the current session (every guard of the client
/// lives on it): its guards are lost at once, and it is revoked once the
/// server answers. The task holds the sessions weakly, so it keeps no
/// client open; it ends with the runtime.
fn lose_on_disconnect(leases: &Arc<LeaseSessions<Sessions>>, dropped: Arc<Notify>) {
    let weak: Weak<LeaseSessions<Sessions>> = Arc::downgrade(leases);
    leases.runtime().spawn(async move {
        loop {
            dropped.notified().await;
            let Some(leases) = weak.upgrade() else { return };
            let Some(session) = leases.current().filter(|s| !s.is_lost()) else {
                continue;
            };
            log::info!(
                "[{}] connection lost: every guard is lost (OnDisconnect)",
                session.label()
            );
            leases.runtime().spawn(async move {
                session.end(LossReason::Disconnected).await;
            });
        }
    });
}

impl fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClient")
            .field("url", &self.url)
            .field("session", &self.leases.current().map(|s| s.id()))
            .field("granted_ttl", &self.leases.granted_ttl())
            .field("loss_policy", &self.loss_policy)
            .finish()
    }
}
