//! The PostgreSQL client: one connection for statements, one that listens,
//! and one session row, on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{BootInstant, LossReason, Result, Runtime, Sessions, Settings};

use crate::builder::{PgClientBuilder, DEFAULT_POLL_INTERVAL};
use crate::db::Db;
use crate::listen::Listener;
use crate::session::{PgLeases, Session};

pub(crate) struct Inner {
    rt: Runtime,
    pub(crate) db: Arc<Db>,
    pub(crate) listener: Listener,
    config: PgClientBuilder,
    // The current session; a new one once it is lost. Entries are named by
    // a fresh uuid, so one session serves every acquisition.
    sessions: Sessions<Session>,
}

impl Inner {
    async fn open(&self) -> Result<Arc<Session>> {
        let store = PgLeases {
            db: self.db.clone(),
        };
        Session::open(store, &self.config.settings, &self.rt).await
    }

    /// Close: the sessions to delete (orphaned ones are left to expire).
    fn close(&self) -> Vec<Arc<Session>> {
        let mut live = self.sessions.close();
        live.retain(|s| !s.is_stopped());
        live
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Delete the rows in the background: the runtime's shutdown gives
        // it a grace period.
        for session in self.close() {
            self.rt.spawn(async move {
                let _ = session.revoke(LossReason::Closed).await;
            });
        }
    }
}

/// A PostgreSQL client on its own runtime thread, whose recipes live in
/// the schema `recipes` under one session row (see the crate docs for the
/// layout); see [`recipes_core::Client`] for what it does.
///
/// The session is a row whose expiry is kept in database time and renewed
/// every TTL/3 by an update that never revives an expired row. Its entries
/// count as contenders only while it has not expired, so a crashed
/// client's locks are free one TTL after its last renewal, and a client
/// whose renewals went unanswered loses its guards (at the local deadline,
/// earlier) before that. Every acquisition of the client shares the
/// session: entries are named by a fresh uuid each.
///
/// Cheap to clone; it closes when the last clone (and every guard made from
/// it) is dropped, or at [`close`](recipes_core::Client::close), which
/// deletes its session row, so its locks are free at once.
#[derive(Clone)]
pub struct PgClient {
    pub(crate) inner: Arc<Inner>,
}

impl PgClient {
    /// Settings for a client of the database at `url`
    /// (`postgres://user:password@host:port/database`).
    pub fn builder(url: impl Into<String>) -> PgClientBuilder {
        PgClientBuilder {
            url: url.into(),
            listen_url: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            settings: Settings::default(),
        }
    }

    /// Connect with default settings.
    ///
    /// # Errors
    ///
    /// As for [`PgClientBuilder::connect`].
    pub fn connect(url: impl Into<String>) -> Result<PgClient> {
        PgClient::builder(url).connect()
    }

    pub(crate) fn start(
        config: PgClientBuilder,
        db: Arc<Db>,
        listener: Listener,
        rt: Runtime,
    ) -> Result<PgClient> {
        let client = PgClient {
            inner: Arc::new(Inner {
                rt,
                db,
                listener,
                config,
                sessions: Sessions::default(),
            }),
        };
        let inner = client.inner.clone();
        client.call("open the client's session", async move {
            inner.sessions.primary(|| inner.open()).await.map(drop)
        })?;
        Ok(client)
    }

    /// The current session, or a new one once it is lost (on the runtime).
    pub(crate) async fn live_session(&self) -> Result<Arc<Session>> {
        let inner = &self.inner;
        inner.sessions.primary(|| inner.open()).await
    }

    pub(crate) fn current_session(&self) -> Option<Arc<Session>> {
        self.inner.sessions.current()
    }

    /// The statement connection.
    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The listening connection.
    pub(crate) fn listener(&self) -> &Listener {
        &self.inner.listener
    }

    /// The deadline of one statement.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.inner.config.settings.rpc_timeout
    }

    /// How often waits look when no notification came.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.inner.config.poll_interval
    }

    /// The URL, without its password.
    pub fn url(&self) -> &str {
        &self.inner.db.shown
    }

    /// The TTL of the current session row; zero once closed.
    pub fn session_ttl(&self) -> Duration {
        self.current_session().map(|s| s.ttl).unwrap_or_default()
    }

    /// The longest a session of this client can outlive its newest
    /// acknowledged renewal.
    pub(crate) fn lease_span(&self) -> Duration {
        self.inner.config.settings.ttl.max(self.session_ttl())
    }

    /// Until when the current session may be assumed alive in the
    /// database: the send time of the newest acknowledged renewal plus the
    /// TTL, less the safety margin. `None` once closed.
    pub fn valid_until(&self) -> Option<BootInstant> {
        self.current_session().and_then(|s| s.epoch.valid_until())
    }

    /// Stop renewing the session without deleting its row, as a crashed
    /// process would: its entries stop counting when the row expires, and
    /// guards held on it fire their loss at their local deadline (before
    /// that). Later acquisitions open a new session.
    pub fn orphan(&self) {
        if let Some(s) = self.current_session() {
            s.orphan();
        }
    }

    /// Run one request on the runtime with the RPC timeout.
    pub(crate) fn call<T, F>(&self, what: &str, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.inner.rt.call(what, self.rpc_timeout(), fut)
    }

    /// The runtime this client runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// [`Client::close_within`](recipes_core::Client::close_within):
    /// delete the session row (not an orphaned one), so every entry goes at
    /// once, then stop the runtime.
    pub(crate) fn close_within(&self, grace: Duration) -> Result<()> {
        let inner = self.inner.clone();
        let ends = self.inner.close().into_iter().map(move |session| {
            let inner = inner.clone();
            async move {
                let ended = session.revoke(LossReason::Closed).await;
                if let Err(e) = &ended {
                    log::debug!("close: deleting the session failed: {e}; the row expires");
                }
                inner.listener.close().await;
                inner.db.close().await;
                ended
            }
        });
        let (rt, linger) = (&self.inner.rt, self.rpc_timeout());
        let what = "delete the client's session";
        recipes_core::end_sessions_within(rt, what, ends.collect(), grace, linger)
    }
}

impl fmt::Debug for PgClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgClient")
            .field("url", &self.url())
            .field("session", &self.current_session().map(|s| s.id))
            .field("session_ttl", &self.session_ttl())
            .finish()
    }
}
