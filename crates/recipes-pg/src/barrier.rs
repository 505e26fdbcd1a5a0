//! Barrier and double barrier on PostgreSQL, in both modes, as the store's
//! verbs of the core wait shape ([`recipes_core::store::engine::gather`]);
//! their rows and waits are described in the crate's docs ("Barriers").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::gather::BarrierStore;
use recipes_core::store::engine::{Nudge, WaitStore};
use recipes_core::store::{check_count, OnRuntime};
use recipes_core::{Error, LossSignal, Result};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::client::PgClient;
use crate::listen::Subscription;
use crate::names::{kind_shown, validate_name};
use crate::session::{session_row_gone, Session};
use crate::sql::violated;

/// The kind of a barrier's row in `recipes.names`.
pub(crate) const BARRIER: &str = "barrier";
/// The kind of a double barrier's row in `recipes.names`.
pub(crate) const DOUBLE_BARRIER: &str = "double-barrier";

/// A barrier or double barrier on one name of a client.
#[derive(Debug, Clone)]
pub struct PgWaits {
    pub(crate) client: PgClient,
    pub(crate) name: String,
    pub(crate) count: u32,
}

/// A PostgreSQL barrier (see the module for its rows).
pub type Barrier = recipes_core::Barrier<PgWaits>;
/// A PostgreSQL double barrier (see the module for its rows).
pub type DoubleBarrier = recipes_core::DoubleBarrier<PgWaits>;

impl PgWaits {
    pub(crate) fn barrier(client: &PgClient, name: &str) -> Result<PgWaits> {
        validate_name("barrier", name)?;
        Ok(PgWaits {
            client: client.clone(),
            name: name.to_owned(),
            count: 0,
        })
    }

    pub(crate) fn double(client: &PgClient, name: &str, count: u32) -> Result<PgWaits> {
        validate_name("double barrier", name)?;
        check_count(
            &format!(
                "the PostgreSQL double barrier {}",
                recipes_core::store::quote(name)
            ),
            count,
        )?;
        Ok(PgWaits {
            client: client.clone(),
            name: name.to_owned(),
            count,
        })
    }

    /// The name holds `found` (a kind of `recipes.names`), not `ours`.
    pub(crate) fn refused(&self, ours: &str, found: &str) -> Error {
        Error::invalid(format!(
            "the PostgreSQL name {} holds another recipe ({}), so {} cannot use it; choose \
             another name for it",
            recipes_core::store::quote(&self.name),
            kind_shown(found),
            kind_shown(ours)
        ))
    }

    /// Listen on the name's channel before a read: `None` (poll) when the
    /// listener cannot be reached.
    pub(crate) async fn ear(&self) -> Option<Subscription> {
        match self.client.listener().subscribe(&self.name).await {
            Ok(s) => Some(s),
            Err(e) => {
                log::debug!("[{}] not listening ({e}); polling", self.name);
                None
            }
        }
    }

    /// The notification armed by a read that found the earliest session
    /// it depends on expiring in `left` seconds.
    pub(crate) fn changes(&self, heard: Option<Subscription>, left: Option<f64>) -> Changes {
        let left = left.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX));
        Changes(Nudge::new(heard, left, self.client.poll_interval()))
    }
}

/// The client's session a wait or a member lives on.
pub struct Epoch(pub(crate) Arc<Session>);

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Epoch({})", self.0.id())
    }
}

/// What a read armed: the name's channel, and when to read again anyway.
#[derive(Debug)]
pub struct Changes(Nudge<Subscription>);

impl OnRuntime for PgWaits {
    fn runtime(&self) -> &recipes_core::store::Runtime {
        self.client.runtime()
    }
}

impl WaitStore for PgWaits {
    type Epoch = Epoch;
    type Watch = Changes;

    fn name(&self) -> &str {
        &self.name
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: the session's end removes our row",
                self.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self) -> Result<Epoch> {
        self.client.live_session().await.map(Epoch)
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        epoch.0.epoch().signal()
    }

    async fn changed(&self, _epoch: &Epoch, watch: Changes) -> Result<()> {
        watch
            .0
            .wait(|mut heard| async move { heard.next().await })
            .await;
        Ok(())
    }
}

/// The first CTE of a writing statement that may wait at the server for
/// a row lock: it sets that statement's `lock_timeout` (its own
/// transaction only) to the parameter `$n`, [`PgClient::lock_wait_bound`]. The
/// statement's rows to lock or write are built from `b`'s row, so the
/// setting is in force before any wait (as a queue's enter sets it first).
/// Without it, a statement that waited past the call's timeout was given
/// up here (and what it would write undone while not there yet), then
/// committed once the lock was free: a member or a barrier's row under
/// our live session that no call of ours owned.
macro_rules! bounded {
    ($n:literal) => {
        concat!(
            "b AS MATERIALIZED (SELECT set_config('lock_timeout', $",
            $n,
            ", true) AS bound)"
        )
    };
}
pub(crate) use bounded;

/// Live rows of the name's queue: their count, and how long the earliest
/// of their sessions has left, in seconds (the same in both recipes).
const LIVE: &str = "(SELECT count(*) FROM recipes.queue q JOIN recipes.sessions s \
                      ON s.id = q.session WHERE q.name = $1 AND s.expires_at > clock_timestamp()), \
                    (SELECT extract(epoch FROM min(s.expires_at) - clock_timestamp())::float8 \
                      FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                      WHERE q.name = $1 AND s.expires_at > clock_timestamp())";

impl PgWaits {
    /// Run `sql`, whose one parameter is the name.
    pub(crate) async fn on_name(&self, what: &str, sql: &str) -> Result<Vec<tokio_postgres::Row>> {
        let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT)];
        self.client.db().query(what, sql, params).await
    }

    /// The kind of the name's row, if it has one.
    pub(crate) async fn kind(&self) -> Result<Option<String>> {
        let sql = "SELECT kind FROM recipes.names WHERE name = $1";
        let what = format!("read the kind of {}", self.name);
        let row = self.on_name(&what, sql).await?.into_iter().next();
        Ok(row.map(|r| r.get(0)))
    }

    /// Refuse the name when its row is of another kind than `ours`.
    pub(crate) async fn check_kind(&self, ours: &str) -> Result<()> {
        match self.kind().await? {
            Some(found) if found != ours => Err(self.refused(ours, &found)),
            _ => Ok(()),
        }
    }
}

impl BarrierStore for PgWaits {
    async fn is_set(&self, _epoch: &Epoch) -> Result<(bool, Changes)> {
        let heard = self.ear().await;
        let sql = format!("SELECT n.kind, n.fence, {LIVE} FROM recipes.names n WHERE n.name = $1");
        let what = format!("read the barrier {}", self.name);
        let row = self.on_name(&what, &sql).await?.into_iter().next();
        let Some(row) = row else {
            return Ok((false, self.changes(heard, None)));
        };
        let kind: String = row.get(0);
        if kind != BARRIER {
            return Err(self.refused(BARRIER, &kind));
        }
        let (plain, tied, left): (i64, i64, Option<f64>) = (row.get(1), row.get(2), row.get(3));
        Ok((plain == 1 || tied > 0, self.changes(heard, left)))
    }

    async fn set(&self, epoch: &Epoch, tied: bool) -> Result<()> {
        let what = format!("set the barrier {}", self.name);
        let bound = self.client.lock_wait_bound();
        let rows = if tied {
            // A row of our session (one is enough), unless it is up plainly.
            let sql = concat!(
                "WITH ",
                bounded!(4),
                ", n AS (
                    INSERT INTO recipes.names (name, kind, next_seq) SELECT $1, 'barrier', 1 FROM b
                    ON CONFLICT (name) DO UPDATE SET next_seq = recipes.names.next_seq + 1
                    WHERE recipes.names.kind = 'barrier' AND recipes.names.fence = 0
                    RETURNING next_seq - 1 AS seq)
                INSERT INTO recipes.queue (name, seq, entry, session)
                SELECT $1, n.seq, $2, $3 FROM n
                WHERE NOT EXISTS (SELECT 1 FROM recipes.queue
                                  WHERE name = $1 AND session = $3)
                RETURNING 1"
            );
            let (entry, session) = (Uuid::new_v4(), epoch.0.id());
            let params: crate::db::Params<'_> = &[
                (&self.name, Type::TEXT),
                (&entry, Type::UUID),
                (&session, Type::INT8),
                (&bound, Type::TEXT),
            ];
            match self.client.db().query(&what, sql, params).await {
                // `once` sends it again, under the session that follows.
                Err(e) if session_row_gone(&epoch.0, &e) => return Err(again(&what, e)),
                rows => rows?,
            }
        } else {
            // Nothing if it is up, tied to a live session.
            let sql = concat!(
                "WITH ",
                bounded!(2),
                " INSERT INTO recipes.names (name, kind, fence) SELECT $1, 'barrier', 1 FROM b \
                 ON CONFLICT (name) DO UPDATE SET fence = 1 \
                 WHERE recipes.names.kind = 'barrier' AND recipes.names.fence = 0 \
                   AND NOT EXISTS (SELECT 1 FROM recipes.queue q JOIN recipes.sessions s \
                     ON s.id = q.session WHERE q.name = $1 AND s.expires_at > clock_timestamp()) \
                 RETURNING 1"
            );
            let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT), (&bound, Type::TEXT)];
            self.client.db().query(&what, sql, params).await?
        };
        if rows.is_empty() {
            // Up already, or the name is another recipe's.
            self.check_kind(BARRIER).await?;
        }
        Ok(())
    }

    async fn remove(&self, _epoch: &Epoch) -> Result<()> {
        // The name's row is locked first, so no tied set adds a row
        // between the two deletes. A set that held it while we waited
        // committed a row our snapshot (older) does not show: the name's
        // row is then still referenced, and the statement fails as a
        // whole; sent again, its new snapshot shows that row.
        let sql = concat!(
            "WITH ",
            bounded!(2),
            ", n AS (SELECT r.name FROM b, recipes.names r
                     WHERE r.name = $1 AND r.kind = 'barrier' FOR UPDATE OF r),
               q AS (DELETE FROM recipes.queue q USING n WHERE q.name = n.name),
               d AS (DELETE FROM recipes.names r USING n WHERE r.name = n.name
                     RETURNING r.name)
               SELECT pg_notify('recipes_' || md5(name), '0') FROM d"
        );
        let what = format!("remove the barrier {}", self.name);
        let bound = self.client.lock_wait_bound();
        let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT), (&bound, Type::TEXT)];
        let rows = match self.client.db().query(&what, sql, params).await {
            Err(e) if violated(&e).as_deref() == Some("queue_name_fkey") => {
                return Err(again(&what, e))
            }
            rows => rows?,
        };
        if rows.is_empty() {
            self.check_kind(BARRIER).await?;
        }
        Ok(())
    }
}

/// `e`, which the same call, sent again, gets past: retryable.
fn again(what: &str, e: Error) -> Error {
    Error::Backend {
        message: format!("{what}: {e}; sending it again"),
        retryable: true,
        source: None,
    }
}
