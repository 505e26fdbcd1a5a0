//! Session mode's lock connections: one PostgreSQL connection per
//! acquisition, whose session is the lease — core's
//! [`LeaseStore`](recipes_core::store::LeaseStore) over a connection.
//!
//! - **grant**: a connection (an idle one of the client's, or a new one)
//!   with `idle_session_timeout` = the TTL, so the server ends the session
//!   — and frees its locks — when heartbeats stop, even while the holder's
//!   TCP connection stays open (a paused process). Its id is the backend's
//!   PID.
//! - **renewal** (a heartbeat, every TTL/3): asks `pg_locks` whether *this*
//!   backend still holds every key taken on the connection, and
//!   `recipes.names` whether each holding's name's row still allows its
//!   fenced writes ([`Fence`]); no (the row truncated, the schema
//!   dropped), a changed PID or an ended connection is loss. While yes, it
//!   stamps the keys' heartbeat rows, making a lost one again (a
//!   truncated `recipes.advisory`, an older backup restored), so the next
//!   holder waits out ours. The local deadline is core's:
//!   the send time of the last acknowledged heartbeat + the TTL. While the
//!   connection waits at the server in one long statement (a read-write
//!   lock's wait, which must not leave the server's queue, see
//!   `slots.rs`), heartbeats go over the client's statement connection and
//!   ask the same of the waiting backend by its PID and start (it is not
//!   idle, so its `idle_session_timeout` does not run); a gate keeps a
//!   heartbeat from ever queueing behind such a wait (`heartbeat.rs`).
//! - **revoke**: `pg_advisory_unlock_all()`, then the connection goes back
//!   to the client's idle ones (or is closed, which frees everything too).
//!
//! Keys are the two-int form `(namespace, hashtext(key name))`; see the
//! crate docs.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use recipes_core::store::{within, LeaseSession, LeaseStore, LossTrigger, Opened};
use recipes_core::{Error, LossReason, Result};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::advisory_lock::Fence;
use crate::client::PgClient;
use crate::db::Db;
pub(crate) use crate::prepared::{On, Prepared};
use crate::sql::{from_pg, unexpected};

/// A backend's start in µs since the epoch, as the server shows it
/// ([`LockConn::started`]), of the row `a` of `pg_stat_get_activity`.
macro_rules! backend_start {
    () => {
        "(extract(epoch FROM a.backend_start) * 1000000)::int8"
    };
}

/// The condition that the backend `$pid` is ours, which started at
/// `$started` (each a parameter or a literal; `$started` NULL where the
/// server did not show our backend's start when the connection opened):
/// a backend of that PID, unless it started at another time — a later
/// backend given the PID of an ended one — or the server does not show
/// its start (another role's: ours it showed). Through the function, not
/// the view: one backend's row, not every backend's joined.
macro_rules! our_backend {
    ($pid:literal, $started:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM pg_stat_get_activity(",
            $pid,
            ") a WHERE coalesce(",
            backend_start!(),
            " = ",
            $started,
            ", ",
            $started,
            " IS NULL))"
        )
    };
}

mod heartbeat;
pub(crate) use heartbeat::Heartbeats;

/// The first int of our advisory keys by default: `recp` in ASCII.
pub const DEFAULT_NAMESPACE: u32 = 0x7265_6370;

/// How many idle lock connections a client keeps. An acquisition takes an
/// idle one before it opens one, so the client never has more open than
/// it held at once; the server ends an idle one a TTL after its last use
/// (`idle_session_timeout`). With four, a client that held eight locks at
/// once opened four new connections for its next eight (`bench pg M6`: a
/// multi-lock of eight names at 29 a second).
const IDLE_LOCK_CONNECTIONS: usize = 16;

/// One acquisition's lock session.
pub(crate) type LockSession = LeaseSession<LockConns>;

/// A connection that holds advisory locks.
pub(crate) struct LockConn {
    pub(crate) client: tokio_postgres::Client,
    /// Its prepared statements ([`On::query`]).
    prepared: Prepared,
    pub(crate) pid: i32,
    /// Its backend's start, in µs since the epoch: with the PID, a name no
    /// later backend process takes (a PID is reused once its backend is
    /// gone). A random number where the server does not show it, never a
    /// constant that two backends of one PID would share. (Behind a
    /// session-mode pool the backend itself may serve another client once
    /// the pool ended ours, its locks released by the pool's reset: our
    /// holdings' loss fires before the next holder, which waits out our
    /// heartbeat stamp, holds.)
    pub(crate) started: i64,
    /// [`started`](Self::started) as the server showed it (`None`: not
    /// shown, so other backends are told from ours by PID alone).
    pub(crate) shown_start: Option<i64>,
    ended: watch::Receiver<bool>,
    /// The keys taken on it (as `pg_locks.objid` shows them, and by name),
    /// which every heartbeat looks for and stamps.
    pub(super) held: Mutex<Vec<(i64, String)>>,
    /// What the holdings on it ask of their names' rows: a heartbeat
    /// that finds a row moved or gone (truncated, the schema dropped) says
    /// the lock is lost.
    pub(super) fences: Mutex<Vec<(String, Fence)>>,
    /// The loss triggers of the holdings on it.
    holdings: Mutex<Vec<LossTrigger>>,
    /// Whether a long wait runs on it (heartbeats then go elsewhere),
    /// changed and read under `gate`.
    pub(super) waiting: std::sync::atomic::AtomicBool,
    /// Held by a heartbeat while it runs on this connection, by a wait
    /// while it says it begins (no heartbeat sent here queues behind a
    /// wait), and by an acquisition from before the statement that stamps
    /// its key until the key is among those the heartbeats stamp
    /// ([`LockConn::stamping`]).
    pub(super) gate: Arc<tokio::sync::Mutex<()>>,
    /// Never to be used for another acquisition ([`LockConn::spend`]): a
    /// cancel of an abandoned wait was sent for this backend (on another
    /// connection, so it may arrive late and hit the next acquisition's
    /// statement); a holding on it was lost; or a permit's fenced write or
    /// transaction ran from it (one whose answer never came may reach the
    /// server after the release). A permit's check asks only that our
    /// backend hold its key, which the next acquisition on this connection
    /// could take again; a lock's or a read-write side's check has its
    /// fence as well.
    spent: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for LockConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockConn")
            .field("pid", &self.pid)
            .field("held", &*self.held.lock())
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl LockConn {
    /// Where statements on this connection run, prepared ([`On::query`]).
    pub(crate) fn on(&self) -> On<'_> {
        On {
            client: &self.client,
            prepared: Some(&self.prepared),
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        *self.ended.borrow() || self.client.is_closed()
    }

    /// Resolves once the connection has ended.
    pub(super) async fn ended(&self) {
        let mut rx = self.ended.clone();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    /// Mark a long wait on this connection until the returned guard is
    /// dropped: from then on heartbeats run on the statement connection.
    /// Waits for a heartbeat running here to finish first. Dropped before
    /// [`LongWait::ended`] (the acquisition gave up), the wait is
    /// cancelled at the server through `client`, so it does not stay in
    /// the key's queue.
    pub(crate) async fn long_wait(self: &Arc<Self>, client: &PgClient) -> LongWait {
        let _gate = self.gate.lock().await;
        self.waiting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        LongWait {
            conn: self.clone(),
            cancel: Some(client.clone()),
        }
    }

    /// Never use it for another acquisition (see [`LockConn::spent`]).
    pub(crate) fn spend(&self) {
        self.spent.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_spent(&self) -> bool {
        self.spent.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Hold the heartbeats back until the guard is dropped: taken before a
    /// statement that may stamp a key we take, and kept until
    /// [`took`](LockConn::took) registered it. A heartbeat sent meanwhile
    /// would stamp only the keys it knew of, and its acknowledgement
    /// would still move the lock session's deadline past the key's stamp
    /// — the deadline a next holder waits out when our backend is ended.
    pub(crate) async fn stamping(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.gate.clone().lock_owned().await
    }

    /// A key taken on this connection.
    pub(crate) fn took(&self, key: i64, name: &str) {
        self.held.lock().push((key, name.to_owned()));
    }

    /// While we hold a key on `name`, its row is as `fence` says (in
    /// place of what it said before: a downgraded writer's).
    pub(crate) fn fenced(&self, name: &str, fence: Fence) {
        let mut fences = self.fences.lock();
        fences.retain(|(n, _)| n != name);
        fences.push((name.to_owned(), fence));
    }

    /// The key `key` is now stamped in the heartbeat row `row`.
    pub(crate) fn rebeat(&self, key: i64, row: &str) {
        for held in self.held.lock().iter_mut().filter(|h| h.0 == key) {
            held.1 = row.to_owned();
        }
    }

    /// The key `key` is being released: heartbeats sent from now on
    /// leave its row alone (a clean release's clear stays).
    pub(crate) fn unbeat(&self, key: i64) {
        self.held.lock().retain(|h| h.0 != key);
    }

    /// A holding on this connection, lost with `trigger` when the server
    /// says the lock is gone.
    pub(crate) fn watch(&self, trigger: LossTrigger) {
        self.holdings.lock().push(trigger);
    }

    /// The server ended the session or no longer shows our lock: every
    /// holding on it is lost, as deleted (before the session's own loss,
    /// so that is the reason they report).
    pub(super) fn gone(&self, why: &str) {
        self.spend();
        for t in self.holdings.lock().drain(..) {
            if t.fire(LossReason::Deleted) {
                log::info!("[backend={}] {why}: lock lost", self.pid);
            }
        }
    }
}

/// The lock connection of one acquisition, and the client's idle ones.
#[derive(Clone)]
pub(crate) struct LockConns {
    db: Arc<Db>,
    ttl: Duration,
    namespace: u32,
    idle: Arc<Mutex<Vec<Arc<LockConn>>>>,
    current: Arc<Mutex<Option<Arc<LockConn>>>>,
}

impl LockConns {
    pub(crate) fn new(
        db: Arc<Db>,
        ttl: Duration,
        namespace: u32,
        idle: Arc<Mutex<Vec<Arc<LockConn>>>>,
    ) -> LockConns {
        LockConns {
            db,
            ttl,
            namespace,
            idle,
            current: Arc::default(),
        }
    }

    /// This acquisition's connection, once granted and until revoked.
    pub(crate) fn conn(&self) -> Result<Arc<LockConn>> {
        self.current.lock().clone().ok_or(Error::Closed)
    }

    async fn open(&self, ttl: Duration) -> Result<Arc<LockConn>> {
        let idle = {
            let mut idle = self.idle.lock();
            idle.retain(|c| !c.is_ended() && !c.is_spent());
            idle.pop()
        };
        if let Some(c) = idle {
            return Ok(c);
        }
        let (client, ended) = self.db.open_watched().await?;
        let what = "open a lock connection";
        // No statement timeout of the role's or the server's on these
        // connections: a wait for a lock runs as long as the caller asked
        // (each call is bounded on our side).
        let sql = concat!(
            "SELECT set_config('idle_session_timeout', $1, false), \
             set_config('statement_timeout', '0', false), pg_backend_pid(), \
             (SELECT ",
            backend_start!(),
            " FROM pg_stat_get_activity(pg_backend_pid()) a)"
        );
        let timeout = format!("{}ms", ttl.as_millis());
        let row = within(what, self.db.rpc_timeout(), async {
            client
                .query_typed(sql, &[(&timeout, Type::TEXT)])
                .await
                .map_err(|e| match e.code() {
                    Some(c) if *c == SqlState::UNDEFINED_OBJECT => Error::invalid(format!(
                        "{what}: this PostgreSQL has no idle_session_timeout, which session \
                         mode needs so that the server frees a stopped holder's locks; use \
                         PostgreSQL 14 or later, or lease mode"
                    )),
                    _ => from_pg(what, e),
                })
        })
        .await?;
        let row = row
            .first()
            .ok_or_else(|| unexpected("a select returned no row"))?;
        let (pid, shown_start): (i32, Option<i64>) = (row.get(2), row.get(3));
        // Not shown: below 10^15 µs (1970–2001), so never a real start.
        let started = shown_start
            .unwrap_or_else(|| (uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000_000) as i64);
        Ok(Arc::new(LockConn {
            client,
            prepared: Prepared::default(),
            pid,
            started,
            shown_start,
            ended,
            held: Mutex::default(),
            fences: Mutex::default(),
            holdings: Mutex::default(),
            waiting: Default::default(),
            gate: Default::default(),
            spent: Default::default(),
        }))
    }
}

impl LeaseStore for LockConns {
    type Renewals = Heartbeats;

    fn label(&self, id: i64) -> String {
        format!("backend={id}")
    }

    /// The TTL is granted as asked: it is the session's
    /// `idle_session_timeout`, to the millisecond.
    async fn grant(&self, ttl: Duration, _timeout: Duration) -> Result<(i64, Duration)> {
        let conn = self.open(ttl).await?;
        let pid = conn.pid;
        *self.current.lock() = Some(conn);
        Ok((i64::from(pid), ttl))
    }

    async fn renewals(&self, _id: i64, _timeout: Duration) -> Result<Opened<Heartbeats>> {
        let Ok(conn) = self.conn() else {
            return Ok(Opened::Gone);
        };
        if conn.is_ended() {
            conn.gone("the server ended the session");
            return Ok(Opened::Gone);
        }
        let ns = i64::from(self.namespace);
        Ok(Opened::Ready(Heartbeats::new(
            conn,
            self.db.clone(),
            self.ttl,
            ns,
        )))
    }

    /// Unlock everything and keep the connection for the next acquisition
    /// (the keys' heartbeat rows stay: only a won holding's release clears
    /// its own, `advisory_lock.rs`);
    /// a connection that does not answer is closed, which frees its locks
    /// as soon as the server notices (at the latest when its
    /// `idle_session_timeout` ends the session).
    async fn revoke(&self, _id: i64, timeout: Duration) -> Result<()> {
        let Some(conn) = self.current.lock().take() else {
            return Ok(());
        };
        // A holding lost (not released) spends the connection: a fenced
        // write of it still on its way asks whether our backend holds its
        // key, which the next acquisition here could take again.
        let lost = conn.holdings.lock().drain(..).any(|t| {
            t.signal()
                .reason()
                .is_some_and(|r| r != LossReason::Released)
        });
        if lost {
            conn.spend();
        }
        if conn.is_ended() {
            return Ok(());
        }
        let what = "release the lock connection's advisory locks";
        within(what, timeout, async {
            conn.on()
                .query("SELECT pg_advisory_unlock_all()", &[])
                .await
                .map_err(|e| from_pg(what, e))
        })
        .await?;
        conn.held.lock().clear();
        conn.fences.lock().clear();
        // A spent connection is not used again (it closes once the last
        // holder of it is gone).
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_LOCK_CONNECTIONS && !conn.is_spent() {
            idle.push(conn);
        }
        Ok(())
    }
}

/// A long wait on a lock connection; at its end heartbeats run there
/// again.
pub(crate) struct LongWait {
    conn: Arc<LockConn>,
    /// Set until the wait's statement answered.
    cancel: Option<PgClient>,
}

impl LongWait {
    /// The wait's statement answered: nothing to cancel.
    pub(crate) fn ended(mut self) {
        self.cancel = None;
    }
}

impl Drop for LongWait {
    fn drop(&mut self) {
        self.conn
            .waiting
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let Some(client) = self.cancel.take() else {
            return;
        };
        self.conn.spend();
        let (pid, started, on) = (self.conn.pid, self.conn.shown_start, client.clone());
        let cancel = async move {
            // Only our backend: once it ended, its PID may be another's.
            let sql = concat!(
                "SELECT pg_cancel_backend($1) WHERE ",
                our_backend!("$1", "$2")
            );
            let what = "cancel an abandoned wait";
            let params: crate::db::Params<'_> = &[(&pid, Type::INT4), (&started, Type::INT8)];
            if let Err(e) = client.db().query(what, sql, params).await {
                log::debug!("[backend={pid}] {what}: {e}");
            }
        };
        on.runtime().spawn(cancel);
    }
}
