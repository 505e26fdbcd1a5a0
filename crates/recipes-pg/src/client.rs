//! The PostgreSQL client: one connection for statements, one for its
//! session's renewals and the poll of its rows, one that listens, and one
//! session row, on its own runtime thread.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{LeaseSessions, PresencePoll, Runtime, Settings};
use recipes_core::{BootInstant, LossPolicy, LossReason, Result};

use crate::advisory::{LockConn, LockConns, LockSession, DEFAULT_NAMESPACE};
use crate::builder::{PgClientBuilder, PgMode, DEFAULT_POLL_INTERVAL};
use crate::db::Db;
use crate::listen::Listener;
use crate::session::{PgLeases, Session};

struct Inner {
    db: Arc<Db>,
    listener: Listener,
    /// The one poll of every row the client holds.
    held_rows: PresencePoll<crate::db::HeldRow>,
    poll_interval: Duration,
    // The current session; a new one once it is lost. Deleted (its entries
    // with it) when the client closes.
    leases: LeaseSessions<PgLeases>,
    mode: PgMode,
    namespace: u32,
    /// Session mode's idle lock connections.
    idle_locks: Arc<parking_lot::Mutex<Vec<Arc<LockConn>>>>,
    /// Session mode's lock sessions, while they live.
    lock_sessions: parking_lot::Mutex<Vec<std::sync::Weak<LockSession>>>,
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
    inner: Arc<Inner>,
}

impl PgClient {
    /// Settings for a client of the database at `url`
    /// (`postgres://user:password@host:port/database`).
    pub fn builder(url: impl Into<String>) -> PgClientBuilder {
        PgClientBuilder {
            url: url.into(),
            listen_url: None,
            user: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            tls: None,
            settings: Settings::default(),
            mode: PgMode::Lease,
            namespace: DEFAULT_NAMESPACE,
            loss_policy: LossPolicy::default(),
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

    /// A client of the connected `db`, with its first session opened.
    pub(crate) fn start(
        config: PgClientBuilder,
        db: Arc<Db>,
        listener: Listener,
        rt: Runtime,
    ) -> Result<PgClient> {
        // Our own rows rarely go behind our back: the poll looks as often
        // as the session is renewed, not as often as a waiter looks; it
        // keeps the connection, not the client, alive.
        let every = config.poll_interval.max(config.settings.ttl / 3);
        let polled = db.clone();
        let held_rows = PresencePoll::new(every, move |entries| {
            let db = polled.clone();
            async move { db.rows_present(entries).await }
        });
        let client = PgClient {
            inner: Arc::new(Inner {
                leases: LeaseSessions::new(PgLeases::new(db.clone()), rt, config.settings),
                db,
                listener,
                held_rows,
                poll_interval: config.poll_interval,
                mode: config.mode,
                namespace: config.namespace,
                idle_locks: Arc::default(),
                lock_sessions: parking_lot::Mutex::default(),
            }),
        };
        if config.loss_policy == LossPolicy::OnDisconnect {
            let inner = Arc::downgrade(&client.inner);
            client.inner.db.on_disconnect(Box::new(move || {
                let session = inner.upgrade().and_then(|i| i.leases.current());
                if let Some(s) = session {
                    if s.epoch().fire(LossReason::Disconnected) {
                        log::info!(
                            "[{}] its connection dropped: lost (OnDisconnect)",
                            s.label()
                        );
                    }
                }
            }));
        }
        let inner = client.inner.clone();
        client.call("open the client's session", async move {
            inner.leases.primary().await.map(drop)
        })?;
        Ok(client)
    }

    /// The current session, or a new one once it is lost (on the runtime).
    pub(crate) async fn live_session(&self) -> Result<Arc<Session>> {
        self.inner.leases.primary().await
    }

    /// The client's sessions.
    pub(crate) fn leases(&self) -> &LeaseSessions<PgLeases> {
        &self.inner.leases
    }

    /// The statement and lease connections.
    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The listening connection.
    pub(crate) fn listener(&self) -> &Listener {
        &self.inner.listener
    }

    /// The one poll of every row the client holds.
    pub(crate) fn held_rows(&self) -> &PresencePoll<crate::db::HeldRow> {
        &self.inner.held_rows
    }

    /// The deadline of one statement.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.inner.leases.settings().rpc_timeout
    }

    /// How long a writing statement may wait at the server for a row lock
    /// (`lock_timeout`, this transaction only): 3/4 of the RPC timeout, so
    /// the server ends the wait (SQLSTATE 55P03, retryable) before the
    /// client gives the statement up and it commits later behind its back.
    pub(crate) fn lock_wait_bound(&self) -> String {
        format!("{}ms", (self.rpc_timeout() * 3 / 4).as_millis().max(1))
    }

    /// How often waits look when no notification came.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.inner.poll_interval
    }

    /// How this client's mutexes and semaphores hold their locks.
    pub fn mode(&self) -> PgMode {
        self.inner.mode
    }

    /// The first int of session mode's advisory keys.
    pub fn namespace(&self) -> u32 {
        self.inner.namespace
    }

    /// A lock connection for one session-mode acquisition.
    pub(crate) fn lock_conns(&self) -> LockConns {
        LockConns::new(
            self.inner.db.clone(),
            self.inner.leases.settings().ttl,
            self.inner.namespace,
            self.inner.idle_locks.clone(),
        )
    }

    /// Count `session` among the client's sessions (its deadline and last
    /// acknowledgement) while it lives.
    pub(crate) fn register(&self, session: &Arc<LockSession>) {
        let mut all = self.inner.lock_sessions.lock();
        all.retain(|s| s.strong_count() > 0);
        all.push(Arc::downgrade(session));
    }

    /// The earliest of `f` over the session row and the live lock sessions:
    /// what holds for every lock of the client.
    pub(crate) fn earliest(
        &self,
        row: Option<BootInstant>,
        f: impl Fn(&LockSession) -> Option<BootInstant>,
    ) -> Option<BootInstant> {
        let locks = self.inner.lock_sessions.lock();
        let live = locks
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|s| s.is_usable())
            .filter_map(|s| f(&s));
        row.into_iter().chain(live).min()
    }

    /// The URL, without its password.
    pub fn url(&self) -> &str {
        &self.inner.db.shown
    }

    /// Stop renewing the session without deleting its row, as a crashed
    /// process would: its entries stop counting when the row expires, and
    /// guards held on it fire their loss at their local deadline (before
    /// that). Later acquisitions open a new session.
    pub fn orphan(&self) {
        self.inner.leases.orphan();
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
        self.inner.leases.runtime()
    }
}

impl fmt::Debug for PgClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgClient")
            .field("url", &self.url())
            .field("session", &self.inner.leases.current().map(|s| s.id()))
            .field("session_ttl", &self.inner.leases.granted_ttl())
            .field("mode", &self.inner.mode)
            .finish()
    }
}
