//! The double barrier's verbs on PostgreSQL (its rows: see
//! [`barrier`](crate::barrier)): each one statement.

use std::sync::Arc;

use recipes_core::store::engine::gather::{DoubleBarrierStore, Flag, Gathering, Member};
use recipes_core::store::Backoff;
use recipes_core::Result;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::barrier::{bounded, Changes, Epoch, PgWaits, DOUBLE_BARRIER};
use crate::client::PgClient;
use crate::session::{session_row_gone, Session};

/// Names our member's row before it exists.
#[derive(Debug)]
pub struct Ticket {
    client: PgClient,
    session: Arc<Session>,
    entry: Uuid,
}

impl DoubleBarrierStore for PgWaits {
    type Ticket = Ticket;

    fn count(&self) -> u32 {
        self.count
    }

    fn ticket(&self, epoch: &Epoch) -> Ticket {
        Ticket {
            client: self.client.clone(),
            session: epoch.0.clone(),
            entry: Uuid::new_v4(),
        }
    }

    /// Our row takes the next place from the name's row, which stays
    /// locked until the insert commits (places are commit order). Sent
    /// again after a lost reply, it finds our row and its place.
    async fn join(&self, epoch: &Epoch, ticket: &mut Ticket) -> Result<i64> {
        let sql = concat!(
            "WITH ",
            bounded!(4),
            ", n AS (
                INSERT INTO recipes.names (name, kind, next_seq)
                SELECT $1, 'double-barrier', 1 FROM b
                ON CONFLICT (name) DO UPDATE SET next_seq = recipes.names.next_seq + 1
                WHERE recipes.names.kind = 'double-barrier'
                RETURNING next_seq - 1 AS seq)
            INSERT INTO recipes.queue (name, seq, entry, session)
            SELECT $1, n.seq, $2, $3 FROM n
            ON CONFLICT DO NOTHING
            RETURNING seq"
        );
        let what = format!("enter the double barrier {}", self.name);
        let (session, bound) = (epoch.0.id(), self.client.lock_wait_bound());
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&ticket.entry, Type::UUID),
            (&session, Type::INT8),
            (&bound, Type::TEXT),
        ];
        // Our session's row gone: the engine enters again under the next.
        let rows = self.client.db().query(&what, sql, params).await;
        let rows = match rows {
            Err(e) if session_row_gone(&epoch.0, &e) => return Err(e),
            rows => rows?,
        };
        if let Some(row) = rows.first() {
            return Ok(row.get(0));
        }
        // Our row exists (sent again), or the name is another recipe's.
        let sql = "SELECT (SELECT seq FROM recipes.queue WHERE name = $1 AND entry = $2), \
                          (SELECT kind FROM recipes.names WHERE name = $1)";
        let params: crate::db::Params<'_> =
            &[(&self.name, Type::TEXT), (&ticket.entry, Type::UUID)];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        let row = row.ok_or_else(|| crate::sql::unexpected("no row from a SELECT"))?;
        match (
            row.get::<_, Option<i64>>(0),
            row.get::<_, Option<String>>(1),
        ) {
            (Some(seq), _) => Ok(seq),
            (None, Some(kind)) if kind != DOUBLE_BARRIER => {
                Err(self.refused(DOUBLE_BARRIER, &kind))
            }
            _ => Err(crate::sql::unexpected("a member vanished while entering")),
        }
    }

    fn is_ours(ticket: &Ticket, member: &str) -> bool {
        ticket.entry.to_string() == member
    }

    /// The flag and the live members in one statement (one snapshot).
    async fn read(&self, _epoch: &Epoch) -> Result<(Gathering, Changes)> {
        let heard = self.ear().await;
        // One aggregate over the live members: names and places agree.
        let sql = "SELECT n.kind, n.fence, m.entries, m.places, m.left_s \
                   FROM recipes.names n CROSS JOIN LATERAL ( \
                     SELECT coalesce(array_agg(q.entry::text ORDER BY q.seq), '{}') AS entries, \
                            coalesce(array_agg(q.seq ORDER BY q.seq), '{}') AS places, \
                            extract(epoch FROM min(s.expires_at) - clock_timestamp())::float8 \
                              AS left_s \
                     FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                     WHERE q.name = $1 AND s.expires_at > clock_timestamp()) m \
                   WHERE n.name = $1";
        let what = format!("read the double barrier {}", self.name);
        let row = self.on_name(&what, sql).await?.into_iter().next();
        let Some(row) = row else {
            let none = Gathering {
                flag: None,
                members: Vec::new(),
            };
            return Ok((none, self.changes(heard, None)));
        };
        let kind: String = row.get(0);
        if kind != DOUBLE_BARRIER {
            return Err(self.refused(DOUBLE_BARRIER, &kind));
        }
        let fence: i64 = row.get(1);
        let flag = (fence > 0).then_some(Flag {
            set_at: fence,
            version: fence,
        });
        let (names, places): (Vec<String>, Vec<i64>) = (row.get(2), row.get(3));
        let members = (names.into_iter().zip(places))
            .map(|(name, place)| Member {
                name,
                created: Some(place),
            })
            .collect();
        let left: Option<f64> = row.get(4);
        Ok((Gathering { flag, members }, self.changes(heard, left)))
    }

    /// The flag takes the next place: above every member who entered
    /// before it, below every one after.
    async fn mark(&self, _epoch: &Epoch, stale: Option<Flag>) -> Result<()> {
        let sql = concat!(
            "WITH ",
            bounded!(3),
            ", f AS (
                UPDATE recipes.names r SET fence = r.next_seq, next_seq = r.next_seq + 1
                FROM b WHERE r.name = $1 AND r.kind = 'double-barrier' AND r.fence = $2
                RETURNING r.name)
            SELECT pg_notify('recipes_' || md5(name), '0') FROM f"
        );
        let what = format!("set the flag of the double barrier {}", self.name);
        let (seen, bound) = (
            stale.map_or(0, |f| f.version),
            self.client.lock_wait_bound(),
        );
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&seen, Type::INT8),
            (&bound, Type::TEXT),
        ];
        // Not applied: someone else set it since our read; we read again.
        self.client.db().query(&what, sql, params).await.map(drop)
    }

    /// The last one out deletes the name's row (flag and places).
    async fn unmark(&self, _epoch: &Epoch, flag: Flag) -> Result<()> {
        let sql = concat!(
            "WITH ",
            bounded!(3),
            " DELETE FROM recipes.names n USING b \
              WHERE n.name = $1 AND n.kind = 'double-barrier' AND n.fence = $2 \
                AND NOT EXISTS (SELECT 1 FROM recipes.queue q WHERE q.name = $1)"
        );
        let what = format!("clear the flag of the double barrier {}", self.name);
        let bound = self.client.lock_wait_bound();
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&flag.version, Type::INT8),
            (&bound, Type::TEXT),
        ];
        self.client.db().query(&what, sql, params).await.map(drop)
    }

    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        remove_member(ticket)
    }
}

/// Delete our row, and the name's row with it when ours was the last and
/// no flag is set (a lonely enter that gave up leaves nothing); until
/// done or the session is lost (its end deletes the row).
async fn remove_member(ticket: Ticket) {
    let sql = "WITH d AS (DELETE FROM recipes.queue WHERE entry = $1 RETURNING name)
        DELETE FROM recipes.names n USING d
        WHERE n.name = d.name AND n.kind = 'double-barrier' AND n.fence = 0
          AND NOT EXISTS (SELECT 1 FROM recipes.queue q
                          WHERE q.name = d.name AND q.entry <> $1)";
    let what = format!(
        "[{}] remove member {}",
        ticket.session.label(),
        ticket.entry
    );
    let delete = || async {
        let params: crate::db::Params<'_> = &[(&ticket.entry, Type::UUID)];
        ticket.client.db().query(&what, sql, params).await.map(drop)
    };
    let lost = || ticket.session.is_lost();
    recipes_core::store::until_done(&what, Backoff::RECOVER, lost, delete).await;
}
