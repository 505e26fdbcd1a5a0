//! Transaction-scoped advisory locks (`pg_advisory_xact_lock`), for work
//! that fits in one transaction: the lock is taken inside the transaction
//! and held until it commits or rolls back, so there is nothing to
//! release, renew or lose in between — a crashed or stopped client's
//! transaction ends with its connection, or after the TTL
//! (`idle_in_transaction_session_timeout`). It is the same key as the
//! session-mode mutex of the name, and bumps the same fence row, so the
//! two exclude each other and share one increasing fence.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::within;
use recipes_core::{FencingToken, Result};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::advisory::On;
use crate::client::PgClient;
use crate::mint::{mint_fence, Beat};
use crate::names::validate_name;
use crate::slots::ADVISORY;
use crate::sql::{from_pg, unexpected};
use crate::transaction::Transaction;

/// The longest one wait at the server.
const SLICE: Duration = Duration::from_millis(500);

impl PgClient {
    /// Run `work` in one transaction holding the advisory lock of `name`
    /// (the session-mode mutex's key), given the fence minted for it;
    /// commit when `work` returns `Ok`, roll back (and so unlock) when it
    /// returns an error or panics. Waits for the lock at most `wait`
    /// (`None`: as long as it takes; zero: only if it is free now), in
    /// slices of at most half a second at the server (not fair: a waiter
    /// between two slices loses its place).
    ///
    /// Works in either mode, but not through a transaction-mode pooler's
    /// URL mixed with session-mode clients of the same name (each holds
    /// the key on whichever backend serves it, which is still exclusive).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](recipes_core::Error::InvalidArgument) for a bad name, or one that holds
    /// another recipe (a lease-mode lock); `work`'s error (rolled back);
    /// a commit that got no reply is
    /// [`Error::Indeterminate`](recipes_core::Error::Indeterminate).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), recipes_pg::Error> {
    /// use std::time::Duration;
    /// use recipes_pg::tokio_postgres::types::Type;
    /// let client = recipes_pg::PgClient::connect("postgres://app@db/app")?;
    /// let done = client.with_xact_lock("/jobs/rollup", Some(Duration::from_secs(5)), |tx, fence| {
    ///     let fence = fence.get() as i64;
    ///     tx.execute("UPDATE rollups SET fence = $1 WHERE fence < $1", &[(&fence, Type::INT8)])
    /// })?;
    /// if done.is_none() {
    ///     println!("another runner has it");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_xact_lock<T>(
        &self,
        name: &str,
        wait: Option<Duration>,
        work: impl FnOnce(&mut Transaction<'_>, FencingToken) -> Result<T>,
    ) -> Result<Option<(FencingToken, T)>> {
        validate_name("lock", name)?;
        if let Some(w) = wait.filter(|w| !w.is_zero()) {
            recipes_core::store::check_timeout("lock wait", w)?;
        }
        let deadline = wait.map(|w| Instant::now() + w);
        let (client, key) = (self.clone(), name.to_owned());
        let begun = self
            .runtime()
            .call_until("take a transaction lock", None, async move {
                crate::mint::refuse_inside_semaphore(&client, &key).await?;
                let conn = client.db().checkout().await?;
                loop {
                    match try_once(&client, &conn, &key, deadline).await {
                        Ok(Some(fence)) => return Ok(Some((Arc::new(conn), fence))),
                        Ok(None) if deadline.is_some_and(|d| Instant::now() >= d) => {
                            client.db().checkin(conn);
                            return Ok(None);
                        }
                        Ok(None) => {}
                        // The connection is dropped: the server rolls back.
                        Err(e) => return Err(e),
                    }
                }
            })?;
        let Some((conn, fence)) = begun else {
            return Ok(None);
        };
        let token = FencingToken(fence.unsigned_abs());
        let tx = Transaction::new(self, format!("{name} (transaction lock)"), conn);
        tx.run(|tx| work(tx, token)).map(|v| Some((token, v)))
    }
}

/// One transaction's try at the lock, waiting at most a slice: its fence,
/// or `None` (rolled back) when the lock was not free.
async fn try_once(
    client: &PgClient,
    conn: &tokio_postgres::Client,
    name: &str,
    deadline: Option<Instant>,
) -> Result<Option<i64>> {
    let what = format!("take the transaction lock of {name}");
    let left = deadline.map_or(SLICE, |d| d.saturating_duration_since(Instant::now()));
    // Under a millisecond left: only a try (a `lock_timeout` of 0 would
    // wait forever).
    let slice = match left.min(SLICE).as_millis() {
        0 => Duration::ZERO,
        ms => Duration::from_millis(ms as u64),
    };
    let ttl_ms = client.leases().settings().ttl.as_millis();
    let mut begin = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
                         SET LOCAL idle_in_transaction_session_timeout = '{ttl_ms}ms'"
    );
    if !slice.is_zero() {
        begin.push_str(&format!(
            "; SET LOCAL lock_timeout = '{}ms'",
            slice.as_millis()
        ));
    }
    let ns = client.namespace() as i32;
    let params: crate::db::Params<'_> = &[(&ns, Type::INT4), (&name, Type::TEXT)];
    let sql = if slice.is_zero() {
        "SELECT pg_try_advisory_xact_lock($1, hashtext($2))"
    } else {
        // Not `… OR true`: the planner folds that to `true` and never
        // takes the lock (measured). Once it is taken, `lock_timeout` goes
        // back to the session's own for the rest of the transaction (the
        // subquery with a volatile call runs first): the slice bounds the
        // wait for the key, not the fence's mint (which waits for a session
        // holder's fenced transaction, as every mint does) nor `work`'s
        // statements.
        "SELECT t.taken AND set_config('lock_timeout', \
           (SELECT reset_val FROM pg_catalog.pg_settings WHERE name = 'lock_timeout'), true) \
           IS NOT NULL \
         FROM (SELECT pg_advisory_xact_lock($1, hashtext($2))::text IS NOT NULL AS taken) t"
    };
    let taken = within(&what, client.rpc_timeout() + slice, async {
        if let Err(e) = conn.batch_execute(&begin).await {
            return Err(from_pg(&what, e));
        }
        Ok(conn.query_typed(sql, params).await)
    })
    .await?;
    let granted = match taken {
        Ok(rows) => rows
            .first()
            .ok_or_else(|| unexpected("a select returned no row"))?
            .get::<_, bool>(0),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => false,
        Err(e) => return Err(from_pg(&what, e)),
    };
    if !granted {
        rollback(client, conn, &what).await?;
        return Ok(None);
    }
    let beat = Beat {
        row: name,
        reader: false,
    };
    match mint_fence(client, On::plain(conn), name, ADVISORY, name, beat, None).await {
        Ok((fence, left)) if left.is_zero() => Ok(Some(fence)),
        // A session holder ended without releasing: wait its deadline out
        // at the server (the transaction must not sit idle).
        Ok((fence, left)) => {
            let secs = left.as_secs_f64();
            within(&what, client.rpc_timeout() + left, async {
                conn.query_typed("SELECT pg_sleep($1)", &[(&secs, Type::FLOAT8)])
                    .await
                    .map_err(|e| from_pg(&what, e))
            })
            .await?;
            Ok(Some(fence))
        }
        Err(e) => {
            rollback(client, conn, &what).await?;
            Err(e)
        }
    }
}

async fn rollback(client: &PgClient, conn: &tokio_postgres::Client, what: &str) -> Result<()> {
    within(what, client.rpc_timeout(), async {
        conn.batch_execute("ROLLBACK")
            .await
            .map_err(|e| from_pg(what, e))
    })
    .await
}
