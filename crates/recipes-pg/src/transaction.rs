//! Transactions fenced by a held lock: the caller's own statements, in the
//! same database, committed only if the holding was still ours when the
//! transaction began — and, because the check locks the name's row in
//! share mode until the commit, no later holder's fence exists before it.

use std::fmt;
use std::sync::Arc;

use recipes_core::store::{refuse_if_lost, within, HeldLease};
use recipes_core::{Error, Leadership, MutexGuard, Result, SemaphorePermit};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::client::PgClient;
use crate::held::{PgHeld, PgLock};
use crate::sql::{from_pg, is_schema_gone, Encoded};

/// Statements of one fenced transaction, run on a connection of their own
/// (held to one backend by the open transaction, so a transaction-mode
/// pooler serves it too). Each statement is unnamed: its parameters carry
/// their types, as tokio-postgres's `query_typed`.
pub struct Transaction<'h> {
    client: &'h PgClient,
    /// What fences it: a holding's holder, or an advisory key.
    holder: String,
    conn: Option<Arc<tokio_postgres::Client>>,
}

type Typed<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

impl Transaction<'_> {
    fn encode(params: Typed<'_>) -> Result<Vec<(Encoded, Type)>> {
        params
            .iter()
            .map(|(v, ty)| Ok((Encoded::new(*v, ty)?, ty.clone())))
            .collect()
    }

    /// Run `sql` with `params` (each with its type) and return its rows.
    ///
    /// # Errors
    ///
    /// The server's refusal ([`Error::Backend`] with PostgreSQL's message
    /// and code); [`Error::Timeout`] after the RPC timeout; a parameter
    /// that does not fit its type is [`Error::InvalidArgument`].
    pub fn query(&mut self, sql: &str, params: Typed<'_>) -> Result<Vec<Row>> {
        let (params, conn) = (Self::encode(params)?, self.conn()?);
        let (sql, what) = (sql.to_owned(), "a statement of a fenced transaction");
        self.client.call(what, async move {
            let typed = borrowed(&params);
            conn.query_typed(&sql, &typed)
                .await
                .map_err(|e| from_pg(what, e))
        })
    }

    /// Run `sql` with `params`; the number of rows it changed.
    ///
    /// # Errors
    ///
    /// As for [`query`](Transaction::query).
    pub fn execute(&mut self, sql: &str, params: Typed<'_>) -> Result<u64> {
        let (params, conn) = (Self::encode(params)?, self.conn()?);
        let (sql, what) = (sql.to_owned(), "a statement of a fenced transaction");
        self.client.call(what, async move {
            let typed = borrowed(&params);
            conn.execute_typed(&sql, &typed)
                .await
                .map_err(|e| from_pg(what, e))
        })
    }

    fn conn(&self) -> Result<Arc<tokio_postgres::Client>> {
        self.conn.clone().ok_or(Error::Closed)
    }

    /// Run statements without parameters (the simple protocol; several
    /// may be separated by `;`).
    ///
    /// # Errors
    ///
    /// As for [`query`](Transaction::query).
    pub fn batch_execute(&mut self, sql: &str) -> Result<()> {
        let conn = self.conn()?;
        let (sql, what) = (sql.to_owned(), "statements of a fenced transaction");
        self.client.call(what, async move {
            conn.batch_execute(&sql).await.map_err(|e| from_pg(what, e))
        })
    }

    fn end(&mut self, commit: bool) -> Result<()> {
        let Some(conn) = self.conn.take() else {
            return Ok(());
        };
        let client = self.client.clone();
        let what = if commit {
            "commit a fenced transaction"
        } else {
            "roll back a fenced transaction"
        };
        // PostgreSQL answers a `COMMIT` of a transaction that a failed
        // statement aborted with a `ROLLBACK` tag, not an error: a
        // statement first, in the same request, says which it is (it
        // fails in an aborted transaction, and the `COMMIT` after it is
        // then not run).
        let sql = if commit {
            "SELECT 1; COMMIT"
        } else {
            "ROLLBACK"
        };
        self.client.call(what, async move {
            let ended = match conn.batch_execute(sql).await {
                Err(err) if commit && err.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) => {
                    conn.batch_execute("ROLLBACK")
                        .await
                        .map_err(|err| from_pg(what, err))?;
                    Err(Error::Backend {
                        message: format!(
                            "{what}: a statement in it failed, so PostgreSQL rolled the \
                             whole transaction back and nothing was committed; return \
                             that statement's error from the closure, or run it after a \
                             SAVEPOINT and roll back to that"
                        ),
                        retryable: false,
                        source: None,
                    })
                }
                other => other.map_err(|err| from_pg(what, err)),
            };
            if let Ok(c) = Arc::try_unwrap(conn) {
                client.db().checkin(c);
            }
            ended
        })
    }
}

/// Encoded parameters as tokio-postgres takes them.
fn borrowed(params: &[(Encoded, Type)]) -> Vec<(&(dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|(v, t)| (v as &(dyn ToSql + Sync), t.clone()))
        .collect()
}

impl Drop for Transaction<'_> {
    /// Not committed (the closure panicked): the connection is dropped,
    /// which rolls the transaction back at the server.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _enter = self.client.runtime().enter();
            drop(conn);
        }
    }
}

impl fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("holder", &self.holder)
            .field("open", &self.conn.is_some())
            .finish()
    }
}

/// Run the caller's statements in one transaction fenced by a held lock,
/// leadership or permit.
pub trait FencedTransaction {
    /// Begin a transaction that first locks the name's row in share mode
    /// and checks that its fence is still this holding's (for a permit:
    /// that our row is live), run `work` in it, and commit when `work`
    /// returns `Ok` (roll back when it returns an error or panics).
    ///
    /// While the transaction is open no later holder can mint its fence
    /// (its confirm waits for the share lock), so what commits here is
    /// ordered before every later holder's writes. Keep it short: new
    /// contenders of the name (whose enter updates the same row) wait for
    /// it too. A read-write lock's holding takes the name's gate instead
    /// (`recipes.rw_held`): a writer's exclusive (no one enters or
    /// confirms meanwhile), a reader's shared (writers wait, readers do
    /// not). A permit locks its own queue row in lease mode, and in
    /// session mode takes its key's gate shared (the next holder of that
    /// key mints its fence under the gate, so it waits for the commit);
    /// other permits are admitted meanwhile. A transaction left idle
    /// longer than the session's TTL (a paused process) is ended by the
    /// server (`idle_in_transaction_session_timeout`), so it cannot block
    /// the lock for longer than a crash would.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] when the holding is gone or stale (nothing
    /// ran); `work`'s error (rolled back); [`Error::Backend`] when `work`
    /// returned `Ok` after a statement of it failed (PostgreSQL rolled
    /// the transaction back: nothing was committed); a commit that got no
    /// reply is [`Error::Indeterminate`]. `work` must not end the
    /// transaction itself (`COMMIT`, `ROLLBACK`): what runs after that is
    /// not fenced.
    fn transaction<T>(&self, work: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> Result<T>;
}

impl FencedTransaction for PgLock {
    fn transaction<T>(&self, work: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> Result<T> {
        refuse_if_lost(self.loss_signal(), "fenced transaction", self.holder())?;
        let entry: &PgHeld = self.entry();
        let (e, check) = (entry.clone(), entry.check()?);
        let begun = entry
            .client()
            .call("begin a fenced transaction", async move {
                let client = e.client();
                let conn = client.db().checkout().await?;
                let what = "begin a fenced transaction";
                let ttl_ms = e.ttl().as_millis();
                let begin = format!(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; \
                         SET LOCAL idle_in_transaction_session_timeout = '{ttl_ms}ms'"
                );
                let checked = within(what, client.rpc_timeout(), async {
                    let begun = async {
                        conn.batch_execute(&begin).await?;
                        conn.query_typed(&check.sql, &check.params()).await
                    };
                    begun.await.map_err(|err| from_pg(what, err))
                });
                match checked.await {
                    Ok(rows) if !rows.is_empty() => Ok(Arc::new(conn)),
                    Ok(_) => {
                        let _ = conn.batch_execute("ROLLBACK").await;
                        client.db().checkin(conn);
                        Err(e.rejected("fenced transaction"))
                    }
                    // The schema was dropped, our fence with it.
                    Err(err) if is_schema_gone(&err) => {
                        let _ = conn.batch_execute("ROLLBACK").await;
                        client.db().checkin(conn);
                        Err(e.rejected("fenced transaction (the schema recipes is gone)"))
                    }
                    Err(err) => Err(err),
                }
            });
        let holder = recipes_core::store::StoreEntry::holder(entry).to_owned();
        Transaction::new(entry.client(), holder, self.seen(begun)?).run(work)
    }
}

impl<'h> Transaction<'h> {
    /// The open transaction on `conn`, fenced by `holder`.
    pub(crate) fn new(
        client: &'h PgClient,
        holder: String,
        conn: Arc<tokio_postgres::Client>,
    ) -> Transaction<'h> {
        Transaction {
            client,
            holder,
            conn: Some(conn),
        }
    }

    /// Run `work`, then commit (`Ok`) or roll back (an error, a panic).
    pub(crate) fn run<T>(
        mut self,
        work: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        match work(&mut self) {
            Ok(value) => self.end(true).map_err(Error::unconfirmed).map(|()| value),
            Err(e) => {
                if let Err(rolled) = self.end(false) {
                    log::debug!("rolling back a fenced transaction failed: {rolled}");
                }
                Err(e)
            }
        }
    }
}

macro_rules! through_the_lease {
    ($guard:ty) => {
        impl FencedTransaction for $guard {
            fn transaction<T>(
                &self,
                work: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
            ) -> Result<T> {
                self.lease().transaction(work)
            }
        }
    };
}

through_the_lease!(MutexGuard<PgLock>);
through_the_lease!(Leadership<PgLock>);
through_the_lease!(SemaphorePermit<PgLock>);
