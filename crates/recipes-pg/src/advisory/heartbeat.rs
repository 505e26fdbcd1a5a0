//! A lock connection's heartbeat (session mode's renewal, see
//! `advisory.rs`): one statement every TTL/3 that asks `pg_locks` whether
//! our backend still holds every key taken on the connection and
//! `recipes.names` whether each holding's name's row still allows its
//! fenced writes, and while both hold, stamps the keys' heartbeat rows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{within, Renewal, RenewalStream};
use recipes_core::{Error, Result};
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;

use super::LockConn;
use crate::db::Db;
use crate::sql::{from_pg, is_schema_gone};

/// The heartbeat, SQL after its last condition (`$1` is our backend's
/// PID; the condition, read after `pg_locks`, that this PID's backend is
/// ours: its locks read before were ours too, a backend's start never
/// changing): our backend holds every key we took, and the names' rows are
/// still as our holdings need them ([`Fence`](crate::advisory_lock::Fence); a row truncated away, or a
/// schema dropped — an error then — is a lost lock) — and, while it does,
/// the keys' heartbeat rows in `recipes.advisory` (made again when lost:
/// a row missing means no wait), which a waiter granted a key its holder
/// did not release waits out (`slots.rs`). Such a row is ours while our
/// backend holds its key (a reader's is named after our backend); a
/// heartbeat that races our clean release's clear (`advisory_lock.rs`)
/// stamps a time we held, so the next holder waits a TTL at most.
macro_rules! heartbeat {
    ($ours:expr) => {
        concat!(
            "WITH ok AS (SELECT \
               (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
                  AND classid::int8 = $2 AND objid::int8 = ANY($3) \
                  AND pid = $1 AND granted) = cardinality($3) AND \
               (SELECT count(*) FROM recipes.names n \
                  JOIN unnest($5::text[], $6::int8[], $7::int8[]) AS f (name, lo, hi) \
                  ON n.name = f.name AND n.fence BETWEEN f.lo AND f.hi) = cardinality($5) AND ",
            $ours,
            " AS ok), \
             beat AS (INSERT INTO recipes.advisory (key, beat_at, ttl) \
                      SELECT DISTINCT k, clock_timestamp(), $8 * interval '1 millisecond' \
                      FROM unnest($4::text[]) AS k WHERE (SELECT ok FROM ok) \
                      ON CONFLICT (key) DO UPDATE \
                      SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl) \
             SELECT ok FROM ok"
        )
    };
}

/// The heartbeat on the lock connection: it is still our backend.
const HEARTBEAT: &str = heartbeat!("pg_backend_pid() = $1");

/// The heartbeat over the statement connection while the lock connection
/// waits: our backend still exists — the PID's backend started when ours
/// did (`$9`): once ours ended, a later backend may be given its PID, and
/// hold our keys (the next holder's).
const HEARTBEAT_OF_WAITING: &str = heartbeat!(our_backend!("$1", "$9"));

/// Heartbeats of one lock connection, answered in the order sent.
pub(crate) struct Heartbeats {
    conn: Arc<LockConn>,
    /// The client's statement connection, for heartbeats during a wait.
    db: Arc<Db>,
    /// The session lives while heartbeats come: each acknowledged one
    /// grants the TTL the session was opened with (`idle_session_timeout`).
    ttl: Duration,
    namespace: i64,
    sent: VecDeque<JoinHandle<Result<bool>>>,
}

impl Heartbeats {
    pub(super) fn new(conn: Arc<LockConn>, db: Arc<Db>, ttl: Duration, namespace: i64) -> Self {
        Heartbeats {
            conn,
            db,
            ttl,
            namespace,
            sent: VecDeque::new(),
        }
    }
}

impl RenewalStream for Heartbeats {
    async fn send(&mut self) -> Result<()> {
        let (conn, ns, db) = (self.conn.clone(), self.namespace, self.db.clone());
        let ttl = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        self.sent.push_back(tokio::spawn(async move {
            let gate = conn.gate.lock().await;
            let (keys, names): (Vec<i64>, Vec<String>) = conn.held.lock().iter().cloned().unzip();
            let (locks, (lo, hi)): (Vec<String>, (Vec<i64>, Vec<i64>)) =
                (conn.fences.lock().iter())
                    .map(|(n, f)| (n.clone(), f.range()))
                    .unzip();
            let what = "heartbeat of a lock connection";
            let params: crate::db::Params<'_> = &[
                (&conn.pid, Type::INT4),
                (&ns, Type::INT8),
                (&keys, Type::INT8_ARRAY),
                (&names, Type::TEXT_ARRAY),
                (&locks, Type::TEXT_ARRAY),
                (&lo, Type::INT8_ARRAY),
                (&hi, Type::INT8_ARRAY),
                (&ttl, Type::INT8),
                (&conn.shown_start, Type::INT8),
            ];
            if conn.waiting.load(std::sync::atomic::Ordering::SeqCst) {
                drop(gate);
                return match db.query(what, HEARTBEAT_OF_WAITING, params).await {
                    Ok(rows) => Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0))),
                    Err(e) if is_schema_gone(&e) => Ok(false),
                    Err(e) => Err(e),
                };
            }
            // Bounded, so that a heartbeat its connection never answers
            // lets go of the gate (an acquisition on this connection waits
            // for it to stamp a key it takes).
            let beat = within(what, db.rpc_timeout(), async {
                (conn.client.query_typed(HEARTBEAT, params).await).map_err(|e| from_pg(what, e))
            });
            match beat.await {
                Ok(rows) => Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0))),
                // The schema was dropped, our fences with it.
                Err(e) if is_schema_gone(&e) => Ok(false),
                Err(e) => Err(e),
            }
        }));
        Ok(())
    }

    /// Cancel-safe: the oldest heartbeat stays queued until it answered.
    async fn reply(&mut self) -> Result<Renewal> {
        let conn = self.conn.clone();
        let answered = async {
            match self.sent.front_mut() {
                Some(oldest) => oldest.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = conn.ended() => {
                conn.gone("the server ended the session");
                Err(Error::ConnectionLoss)
            }
            answered = answered => {
                self.sent.pop_front();
                match answered.map_err(|_| Error::ConnectionLoss)? {
                    Ok(true) => Ok(Renewal::Granted(self.ttl)),
                    Ok(false) => {
                        conn.gone(
                            "pg_locks no longer shows our lock on this backend, or its \
                             fence row is gone",
                        );
                        Ok(Renewal::Gone)
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }
}
