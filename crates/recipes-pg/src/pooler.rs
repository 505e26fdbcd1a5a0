//! Refusing session mode behind a transaction-mode pooler, where session
//! locks are meaningless: the pooler hands the backend that holds a lock
//! to other clients between statements, and runs our next statement
//! (the unlock, the heartbeat) on another backend.
//!
//! A PID compare alone is not deterministic: with one client and an idle
//! pool, pgbouncer hands back the same backend and every statement sees
//! the same PID. So the probe makes the pool choose: connection A reads
//! its backend's PID; connection B, opened to the same URL, reads its own
//! — a transaction pooler gives B the backend A just released (pgbouncer
//! reuses the most recently released server connection first, its
//! default `server_round_robin = 0`), a direct connection or a session
//! pool never does; then A reads its PID again, which a pooler that
//! handed A's backend to B must change.
//!
//! The probe can still pass (a pool that hands out backends in another
//! order, other traffic through it), so every take of a lock also runs
//! only on the backend its connection opened on (`slots.rs`): a take that
//! the pooler moved takes nothing and is refused the same way.

use recipes_core::store::within;
use recipes_core::{Error, Result};

use crate::db::Db;
use crate::sql::{from_pg, unexpected};

/// The backend PID one statement of `client` ran on.
async fn pid(db: &Db, client: &tokio_postgres::Client) -> Result<i32> {
    let what = "read the backend PID";
    let rows = within(what, db.rpc_timeout(), async {
        client
            .query_typed("SELECT pg_backend_pid()", &[])
            .await
            .map_err(|e| from_pg(what, e))
    })
    .await?;
    Ok(rows
        .first()
        .ok_or_else(|| unexpected("a select returned no row"))?
        .get(0))
}

/// Refuse `db` for session mode when a pooler moves a connection's
/// statements between backends.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the fix; connection errors.
pub(crate) async fn refuse_transaction_pooling(db: &Db) -> Result<()> {
    let a = db.open(|_| {}).await?;
    let first = pid(db, &a).await?;
    let b = db.open(|_| {}).await?;
    let other = pid(db, &b).await?;
    let again = pid(db, &a).await?;
    if other != first && again == first {
        return Ok(());
    }
    log::debug!(
        "[pg={}] one connection's statements ran on backends {first} and {again}, \
         another connection's on {other}",
        db.shown
    );
    Err(pooled(&db.shown))
}

/// The refusal of session mode behind a transaction-mode pooler at `shown`.
pub(crate) fn pooled(shown: &str) -> Error {
    Error::invalid(format!(
        "session mode cannot work through {shown}: a transaction-mode pooler (such as \
         pgbouncer with pool_mode = transaction) is in the path, and it hands each \
         transaction to whichever server connection is free, so a lock taken for one client \
         would be left on a connection that other clients then use. Use lease mode (the \
         default: PgMode::Lease, --pg-mode lease), or connect to the PostgreSQL server itself \
         or to a session-mode pool"
    ))
}
