//! PostgreSQL's leases as core's [`LeaseStore`]: a lease is one row of
//! `recipes.sessions` whose expiry is kept in database time
//! (`clock_timestamp()`); a renewal is a guarded update that never
//! revives an expired row (0 rows: the lease is gone); a revoke deletes
//! the row, and its cascade every entry of it. A session is core's
//! [`LeaseSession`] over them (the grant's timing, renewals every TTL/3 —
//! a renewal that finds the row, or the schema, gone is the lease's loss —
//! the local deadline, the revoke on every way out), and the client's
//! sessions are core's [`LeaseSessions`](recipes_core::store::LeaseSessions).
//!
//! Entries are named by a fresh uuid each, so acquisitions of one name
//! share the client's session: no turn at a name is ever taken.
//!
//! The grant and the renewals go on the client's lease connection
//! ([`Lane::Leases`]), never behind a statement that waits at the server
//! for a row lock (an enter of a name whose row a fenced transaction
//! holds): such a wait held up every renewal pipelined behind it until
//! the RPC timeout broke the connection, past the local deadline, and
//! every lock of the client was reported lost. The revoke and the sweep
//! delete rows (and, by cascade, entries), which may wait for a lock: they
//! stay on the statement connection.
//!
//! About once a TTL (core's [`LeaseStore::audit`]), the client lists its session's entries
//! in a lock's, a semaphore's or a read-write lock's queue and releases
//! those that none of its tickets owns ([`OwnedEntries`]: each registered
//! before its enter is sent, until its removal is done or given up): entries an
//! older backup restored under a running client brought back, which would
//! otherwise hold their lock for no one until the session ends.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{
    LeaseSession, LeaseStore, Opened, Owned, OwnedEntries, Renewal, RenewalStream,
};
use recipes_core::{Error, LossReason, Result};
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::db::{Db, Lane};
use crate::sql::{is_schema_gone, unexpected, violated};

/// A session: one row of `recipes.sessions`, kept alive.
pub(crate) type Session = LeaseSession<PgLeases>;

/// Whether `e` says our `session`'s row is gone (truncated, or the schema
/// made again) as a row of it was written: so is every row of it. The
/// session is then lost (revoked), and what is done next takes a new one.
pub(crate) fn session_row_gone(session: &Session, e: &Error) -> bool {
    if violated(e).as_deref() != Some("queue_session_fkey") {
        return false;
    }
    log::info!("[{}] the session's row is gone: {e}", session.label());
    session.epoch().fire(LossReason::Revoked);
    true
}

/// Sessions expired this long ago are deleted by the next grant of any
/// client (their entries go with them); an expired session's entries never
/// count as contenders anyway.
const SWEEP_AFTER: &str = "1 minute";

/// A new session's row, its id floored by the database clock in µs: the
/// ids' sequence runs behind the clock (one a session), and an older
/// backup restored sets it back to where it stood at the dump, so a new
/// session would take the id of one opened since — whose client, its row
/// gone with the restore, would renew the newcomer's row as its own and
/// never learn its locks were lost. Every id this release gives is at
/// least the clock when given, and above every id in the table (ids are
/// unique: the sequence, which a client of an older release still draws,
/// runs far behind the clock); a lock held to the end of this statement,
/// which waits for nothing after it, keeps two of them from reading the
/// same clock and table at once. (Setting the sequence instead would need
/// `UPDATE` on it, which the roles that use the schema are not granted.)
const GRANT: &str = "WITH g AS MATERIALIZED ( \
        SELECT pg_advisory_xact_lock(hashtext('recipes.sessions'))) \
    INSERT INTO recipes.sessions (id, ttl, expires_at) OVERRIDING SYSTEM VALUE \
    SELECT greatest((extract(epoch FROM clock_timestamp()) * 1000000)::int8, \
                    (SELECT coalesce(max(id), 0) + 1 FROM recipes.sessions)), \
           $1 * interval '1 millisecond', clock_timestamp() + $1 * interval '1 millisecond' \
    FROM g RETURNING id";

/// The queue entries the client's tickets own, in any session.
type Known = OwnedEntries<Uuid>;

/// An entry registered as owned while this lives.
pub(crate) type Registered = Owned<Uuid>;

/// The database's session rows, reached through the client's connections,
/// and the entries the client's tickets own.
#[derive(Clone)]
pub(crate) struct PgLeases(pub(crate) Arc<Db>, Arc<Known>);

impl PgLeases {
    pub(crate) fn new(db: Arc<Db>) -> PgLeases {
        PgLeases(db, Arc::default())
    }

    /// Register `entry` as owned until the handle drops: before its enter
    /// is sent, kept until its removal is done or given up.
    pub(crate) fn register(&self, entry: Uuid) -> Registered {
        self.1.register(entry)
    }
}

impl LeaseStore for PgLeases {
    type Renewals = PgRenewals;

    fn label(&self, id: i64) -> String {
        format!("session={id}")
    }

    /// Insert a row expiring `ttl` from now in database time; the TTL is
    /// granted as asked, to the millisecond. Then, in the background,
    /// sweep long-expired rows.
    async fn grant(&self, ttl: Duration, _timeout: Duration) -> Result<(i64, Duration)> {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let row = self
            .0
            .query_opt_on(Lane::Leases, "open a session", GRANT, &[(&ms, Type::INT8)])
            .await?
            .ok_or_else(|| unexpected("an insert returned no row"))?;
        let db = self.0.clone();
        tokio::spawn(async move {
            let sweep = format!(
                "DELETE FROM recipes.sessions \
                 WHERE expires_at < clock_timestamp() - interval '{SWEEP_AFTER}'"
            );
            if let Err(e) = db.query("sweep expired sessions", &sweep, &[]).await {
                log::debug!("sweeping expired sessions failed: {e}");
            }
            // Session mode's readers that ended without releasing leave a
            // row each (named by backend: never reused), which makes no
            // one wait once past its deadline; a writer's mint sweeps
            // those of its key, this the rest.
            let sweep = format!(
                "DELETE FROM recipes.advisory WHERE strpos(key, chr(31) || 'reader-') > 0 \
                 AND beat_at + ttl < clock_timestamp() - interval '{SWEEP_AFTER}'"
            );
            if let Err(e) = db.query("sweep dead readers' rows", &sweep, &[]).await {
                log::debug!("sweeping dead readers' rows failed: {e}");
            }
        });
        Ok((row.get(0), Duration::from_millis(ms.unsigned_abs())))
    }

    async fn renewals(&self, id: i64, _timeout: Duration) -> Result<Opened<PgRenewals>> {
        Ok(Opened::Ready(PgRenewals {
            db: self.0.clone(),
            id,
            sent: VecDeque::new(),
        }))
    }

    async fn revoke(&self, id: i64, _timeout: Duration) -> Result<()> {
        let sql = "DELETE FROM recipes.sessions WHERE id = $1";
        self.0
            .query("end a session", sql, &[(&id, Type::INT8)])
            .await
            .map(drop)
    }

    const AUDITS: bool = true;

    fn audit(&self, id: i64, _timeout: Duration) -> impl Future<Output = ()> + Send + 'static {
        forget_unknown(self.0.clone(), id, self.1.clone())
    }
}

/// Renewals of one session on the client's lease connection: each one an
/// update of its own, answered in the order sent.
pub(crate) struct PgRenewals {
    db: Arc<Db>,
    id: i64,
    sent: VecDeque<JoinHandle<Result<Renewal>>>,
}

impl RenewalStream for PgRenewals {
    async fn send(&mut self) -> Result<()> {
        let (db, id) = (self.db.clone(), self.id);
        self.sent.push_back(tokio::spawn(async move {
            let sql = "UPDATE recipes.sessions SET expires_at = clock_timestamp() + ttl \
                       WHERE id = $1 AND expires_at > clock_timestamp() \
                       RETURNING (extract(epoch FROM ttl) * 1000)::int8";
            let params: crate::db::Params<'_> = &[(&id, Type::INT8)];
            let row = match db
                .query_opt_on(Lane::Leases, "renew the session", sql, params)
                .await
            {
                Ok(row) => row,
                // The schema was dropped: our row with it.
                Err(e) if is_schema_gone(&e) => None,
                Err(e) => return Err(e),
            };
            Ok(match row {
                Some(row) => {
                    Renewal::Granted(Duration::from_millis(row.get::<_, i64>(0).unsigned_abs()))
                }
                None => Renewal::Gone,
            })
        }));
        Ok(())
    }

    /// Cancel-safe: the oldest renewal stays queued until it answered.
    async fn reply(&mut self) -> Result<Renewal> {
        let Some(oldest) = self.sent.front_mut() else {
            return std::future::pending().await;
        };
        let answered = oldest.await;
        self.sent.pop_front();
        answered.map_err(|_| Error::ConnectionLoss)?
    }
}

/// Release the entries of our live session `id` in a lock's, a
/// semaphore's or a read-write lock's queue that no ticket of the client
/// owns (see the module's documentation), as their owner's release would
/// (`recipes.release`: the row deleted, its waiters told). A listed entry
/// whose ticket is dropped meanwhile (its removal done) is released again:
/// nothing is left to delete.
async fn forget_unknown(db: Arc<Db>, id: i64, known: Arc<Known>) {
    let what = "list the session's entries";
    let sql = "SELECT q.entry FROM recipes.queue q JOIN recipes.names n ON n.name = q.name \
               WHERE q.session = $1 AND n.kind IN ('lock', 'semaphore', 'permits', 'rwlock')";
    let listed = match db.query(what, sql, &[(&id, Type::INT8)]).await {
        Ok(rows) => rows,
        Err(e) => return log::debug!("[session={id}] {what}: {e}"),
    };
    let strays = known.strays(listed.iter().map(|r| r.get::<_, Uuid>(0)));
    if strays.is_empty() {
        return;
    }
    let what = "release entries of the session that no guard owns";
    let sql = "SELECT count(*) FROM recipes.queue q, LATERAL recipes.release(q.entry) \
               WHERE q.entry = ANY($1) AND q.session = $2";
    let params: crate::db::Params<'_> = &[(&strays, Type::UUID_ARRAY), (&id, Type::INT8)];
    match db.query(what, sql, params).await {
        Ok(rows) => match rows.first().map_or(0, |r| r.get::<_, i64>(0)) {
            0 => {}
            n => log::warn!(
                "[session={id}] released {n} entries of this session that no guard owns \
                 (brought back by an older backup restored?)"
            ),
        },
        Err(e) => log::debug!("[session={id}] {what}: {e}"),
    }
}
