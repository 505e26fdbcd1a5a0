//! Group membership on PostgreSQL, in both modes, as the store's verbs of
//! the core group loops ([`recipes_core::store::engine::group`]), with no
//! layout change:
//!
//! - the name's row of `recipes.names`, of kind `group`, holds the
//!   group's version in `next_seq` and its count of members in `permits`;
//! - a member is a row of `recipes.queue` under the name, owned by its
//!   client's session (it goes with the session), whose `entry` is
//!   `md5(<name> || '/' || <id>)` (one row per id: the unique `entry` is
//!   what refuses a second member of an id) and whose `value` is the id,
//!   a zero byte, then the member's data.
//!
//! Every join and leave sets the version to `greatest(version + 1, the
//! database clock in µs)` in the statement that writes the member, and so
//! does a read that finds a member whose session expired (it deletes it in
//! that statement) or fewer rows than `permits` (a session's end deleted
//! them). The last member out deletes the name's row; an empty group's
//! view has the database clock as its version. So a change's version is
//! above every version shown before it (as fences are, following the
//! database clock), after a `TRUNCATE` too; a read between the restore
//! of an older backup and the next change shows the backup's version,
//! which may be below one shown before (a reader that compares versions
//! keeps the view it has). A view's `changes` is `None`.
//!
//! A joined member's row is watched by the client's one poll of its held
//! rows (as a held lock's is): a row gone while our session lives — a
//! `TRUNCATE`, a restore from before the join, a delete by hand — is the
//! membership's loss, within that poll's interval.
//!
//! Watching: the queue's trigger notifies the name's channel on every
//! change of a member row; a watch listens before each read, and reads
//! again when the earliest member's session would expire and every poll
//! interval (as barriers do).

use std::sync::Arc;

use recipes_core::store::engine::group::{GroupStore, GroupView, Member};
use recipes_core::store::{id_taken, Backoff, EntryWatcher};
use recipes_core::{Error, Result};
use tokio_postgres::types::Type;

use crate::barrier::{bounded, Changes, Epoch, PgWaits};
use crate::client::PgClient;
use crate::names::validate_name;
use crate::session::{session_row_gone, Session};
use crate::sql::{fence_floor, violated};

/// The kind of a group's row in `recipes.names`.
pub(crate) const GROUP: &str = "group";

/// A PostgreSQL group (see the module for its rows).
pub type Group = recipes_core::Group<PgWaits>;

/// A member's `entry`, from the name (`$1`) and the id (`$2`).
macro_rules! entry {
    () => {
        "md5($1 || '/' || $2)::uuid"
    };
}

/// How many times a read runs again after it repaired the group (purged
/// an expired member) before it gives up with a retryable error.
const READS: usize = 3;

impl PgWaits {
    pub(crate) fn group(client: &PgClient, name: &str) -> Result<PgWaits> {
        validate_name("group", name)?;
        Ok(PgWaits {
            client: client.clone(),
            name: name.to_owned(),
            count: 0,
        })
    }

    /// Read the group once: `None` when the read repaired it (so its
    /// snapshot is older than the version it set), else the view and how
    /// long the earliest member's session has left, in seconds.
    async fn read_once(&self) -> Result<Option<(GroupView, Option<f64>)>> {
        let sql = concat!(
            "WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
            n AS MATERIALIZED (SELECT kind, next_seq, permits FROM recipes.names WHERE name = $1),
            m AS MATERIALIZED (
                SELECT q.entry, q.session, q.value, s.expires_at, s.expires_at > t.now AS live
                FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session CROSS JOIN t
                WHERE q.name = $1),
            stale AS MATERIALIZED (
                SELECT (SELECT count(*) FROM m WHERE m.live) AS live FROM n
                WHERE n.kind = 'group'
                  AND (n.permits IS DISTINCT FROM (SELECT count(*) FROM m)
                       OR EXISTS (SELECT 1 FROM m WHERE NOT m.live))),
            d AS (DELETE FROM recipes.queue q USING m, stale
                  WHERE q.entry = m.entry AND q.session = m.session AND NOT m.live),
            u AS (UPDATE recipes.names r
                  SET next_seq = greatest(r.next_seq + 1, ",
            fence_floor!(),
            "), permits = stale.live
                  FROM stale WHERE r.name = $1 AND r.kind = 'group' AND stale.live > 0),
            g AS (DELETE FROM recipes.names r USING stale
                  WHERE r.name = $1 AND r.kind = 'group' AND stale.live = 0)
            SELECT (SELECT kind FROM n), (SELECT next_seq FROM n), EXISTS (SELECT 1 FROM stale),
                   (SELECT coalesce(array_agg(m.value), '{}') FROM m),
                   (SELECT extract(epoch FROM min(m.expires_at) - (SELECT now FROM t))::float8
                    FROM m),
                   ",
            fence_floor!()
        );
        let what = format!("read the group {}", self.name);
        let rows = match self.on_name(&what, sql).await {
            // The last member's row went, and a join came in before the
            // name's row did: read again.
            Err(e) if violated(&e).as_deref() == Some("queue_name_fkey") => return Ok(None),
            rows => rows?,
        };
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| crate::sql::unexpected("no row from a SELECT"))?;
        if row.get::<_, bool>(2) {
            return Ok(None);
        }
        let kind: Option<String> = row.get(0);
        let version = match kind.as_deref() {
            None => row.get::<_, i64>(5),
            Some(GROUP) => row.get::<_, i64>(1),
            Some(other) => return Err(self.refused(GROUP, other)),
        };
        let values: Vec<Vec<u8>> = row.get(3);
        let mut members: Vec<Member> = values.iter().map(|v| member(v)).collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        let view = GroupView {
            members,
            version: version.unsigned_abs(),
            changes: None,
        };
        Ok(Some((view, row.get(4))))
    }

    /// Why a join wrote nothing: ours already, another's, or the name is
    /// another recipe's.
    async fn not_joined(&self, epoch: &Epoch, id: &str) -> Result<bool> {
        let sql = concat!(
            "SELECT (SELECT q.session FROM recipes.queue q JOIN recipes.sessions s \
                     ON s.id = q.session \
                     WHERE q.entry = ",
            entry!(),
            " AND s.expires_at > clock_timestamp()), \
                    (SELECT kind FROM recipes.names WHERE name = $1)"
        );
        let what = format!("join the group {}", self.name);
        let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT), (&id, Type::TEXT)];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        let row = row.ok_or_else(|| crate::sql::unexpected("no row from a SELECT"))?;
        match (
            row.get::<_, Option<i64>>(0),
            row.get::<_, Option<String>>(1),
        ) {
            (Some(session), _) if session == epoch.0.id() => Ok(false),
            (Some(_), _) => Err(id_taken(&self.name, id)),
            (None, Some(kind)) if kind != GROUP => Err(self.refused(GROUP, &kind)),
            // The member left (or expired) between the two statements:
            // the engine sends the join again.
            _ => Err(Error::Indeterminate { what }),
        }
    }
}

/// A member from its row's value: the id, a zero byte, the data (an id
/// holds no control character).
fn member(value: &[u8]) -> Member {
    let at = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    Member {
        id: String::from_utf8_lossy(&value[..at]).into_owned(),
        data: value.get(at + 1..).unwrap_or_default().to_vec(),
    }
}

/// Names our member: its session, group and id.
#[derive(Debug)]
pub struct Ticket {
    client: PgClient,
    session: Arc<Session>,
    name: String,
    id: String,
}

impl GroupStore for PgWaits {
    type Ticket = Ticket;

    fn ticket(&self, epoch: &Epoch, id: &str) -> Ticket {
        Ticket {
            client: self.client.clone(),
            session: epoch.0.clone(),
            name: self.name.clone(),
            id: id.to_owned(),
        }
    }

    /// Our row, and the version's bump, in one statement; a row of the id
    /// whose session expired is taken over. Nothing is written when a live
    /// member holds the id (ours or another's: a second statement tells
    /// which).
    async fn join(&self, epoch: &Epoch, ticket: &Ticket, data: &[u8]) -> Result<bool> {
        let sql = concat!(
            "WITH ",
            bounded!(5),
            ", e AS MATERIALIZED (SELECT ",
            entry!(),
            " AS entry FROM b),
            n AS (
                INSERT INTO recipes.names (name, kind, next_seq, permits)
                SELECT $1, 'group', ",
            fence_floor!(),
            ", 1 FROM e
                ON CONFLICT (name) DO UPDATE
                SET next_seq = greatest(recipes.names.next_seq + 1, ",
            fence_floor!(),
            "), permits = recipes.names.permits
                    + CASE WHEN EXISTS (SELECT 1 FROM recipes.queue q, e WHERE q.entry = e.entry)
                      THEN 0 ELSE 1 END
                WHERE recipes.names.kind = 'group'
                  AND NOT EXISTS (SELECT 1 FROM recipes.queue q
                                  JOIN recipes.sessions s ON s.id = q.session, e
                                  WHERE q.entry = e.entry AND s.expires_at > clock_timestamp())
                RETURNING next_seq)
            INSERT INTO recipes.queue (name, seq, entry, session, value)
            SELECT $1, n.next_seq, e.entry, $3, $4 FROM n, e
            ON CONFLICT (entry) DO UPDATE
            SET seq = EXCLUDED.seq, session = EXCLUDED.session, value = EXCLUDED.value
            WHERE NOT EXISTS (SELECT 1 FROM recipes.sessions s
                              WHERE s.id = recipes.queue.session
                                AND s.expires_at > clock_timestamp())
            RETURNING seq"
        );
        let what = format!("join the group {}", self.name);
        let (session, bound) = (epoch.0.id(), self.client.lock_wait_bound());
        let mut value = Vec::with_capacity(ticket.id.len() + 1 + data.len());
        value.extend_from_slice(ticket.id.as_bytes());
        value.push(0);
        value.extend_from_slice(data);
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&ticket.id, Type::TEXT),
            (&session, Type::INT8),
            (&value, Type::BYTEA),
            (&bound, Type::TEXT),
        ];
        match self.client.db().query(&what, sql, params).await {
            // Our session's row is gone, and every member of it: the
            // engine joins again under the next.
            Err(e) => {
                session_row_gone(&epoch.0, &e);
                Err(e)
            }
            Ok(rows) if rows.is_empty() => self.not_joined(epoch, &ticket.id).await,
            Ok(_) => Ok(true),
        }
    }

    /// Listens first, then reads; a read that purged an expired member
    /// (and set the version) reads again.
    async fn read(&self, _epoch: &Epoch, arm: bool) -> Result<(GroupView, Option<Changes>)> {
        let heard = match arm {
            true => self.ear().await,
            false => None,
        };
        for _ in 0..READS {
            if let Some((view, left)) = self.read_once().await? {
                let changes = arm.then(|| self.changes(heard, left));
                return Ok((view, changes));
            }
        }
        Err(Error::Backend {
            message: format!(
                "the group {} changed under each of {READS} reads",
                recipes_core::store::quote(&self.name)
            ),
            retryable: true,
            source: None,
        })
    }

    type Member = MemberRow;

    fn member(&self, ticket: &Ticket) -> MemberRow {
        MemberRow {
            client: self.client.clone(),
            session: ticket.session.clone(),
            name: self.name.clone(),
            id: ticket.id.clone(),
        }
    }

    /// Delete our row and set the version (or delete the name's row when
    /// ours was the last), until done or the session is lost (its end
    /// deletes the row).
    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        remove_member(ticket)
    }
}

async fn remove_member(ticket: Ticket) {
    let sql = concat!(
        "WITH d AS (DELETE FROM recipes.queue WHERE entry = ",
        entry!(),
        " AND session = $3 RETURNING name),
        rest AS MATERIALIZED (SELECT count(*) AS c FROM recipes.queue q
                              WHERE q.name = $1 AND q.entry <> ",
        entry!(),
        "),
        u AS (UPDATE recipes.names r SET next_seq = greatest(r.next_seq + 1, ",
        fence_floor!(),
        "), permits = r.permits - 1
              FROM rest WHERE r.name = $1 AND r.kind = 'group' AND rest.c > 0
                AND EXISTS (SELECT 1 FROM d))
        DELETE FROM recipes.names r USING rest
        WHERE r.name = $1 AND r.kind = 'group' AND rest.c = 0 AND EXISTS (SELECT 1 FROM d)"
    );
    let what = format!(
        "[{}] leave the group {} as {}",
        ticket.session.label(),
        ticket.name,
        ticket.id
    );
    let session = ticket.session.id();
    let delete = || async {
        let params: crate::db::Params<'_> = &[
            (&ticket.name, Type::TEXT),
            (&ticket.id, Type::TEXT),
            (&session, Type::INT8),
        ];
        ticket.client.db().query(&what, sql, params).await.map(drop)
    };
    let lost = || ticket.session.is_lost();
    recipes_core::store::until_done(&what, Backoff::RECOVER, lost, delete).await;
}

/// Our member's row, followed by core's `watch_held` through the client's
/// poll of the rows it holds until it is gone — or another session's: the
/// row's entry is named by the member's id, so a join of the id after
/// ours went writes the same entry.
pub struct MemberRow {
    client: PgClient,
    session: Arc<Session>,
    name: String,
    id: String,
}

/// Our member's row as the client's poll knows it.
pub struct MemberWatch {
    client: PgClient,
    row: crate::db::HeldRow,
}

impl EntryWatcher for MemberRow {
    type Watch = MemberWatch;

    /// Our row's entry, computed by the database as the join does.
    async fn watch(&self) -> Result<Option<MemberWatch>> {
        let sql = concat!("SELECT ", entry!());
        let what = format!(
            "name the row of the member {} of the group {}",
            self.id, self.name
        );
        let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT), (&self.id, Type::TEXT)];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        Ok(row.map(|row| MemberWatch {
            client: self.client.clone(),
            row: crate::db::HeldRow {
                entry: row.get(0),
                session: self.session.id(),
                fence: None,
            },
        }))
    }

    async fn deleted(w: &mut MemberWatch) -> Result<()> {
        w.client.held_rows().gone(w.row).await;
        Ok(())
    }
}

impl std::fmt::Debug for MemberRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberRow").field("id", &self.id).finish()
    }
}

impl std::fmt::Debug for MemberWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberWatch")
            .field("row", &self.row)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::member;

    #[test]
    fn a_members_value_is_its_id_then_its_data() {
        let m = member(b"a\0addr\0x");
        assert_eq!((m.id.as_str(), &m.data[..]), ("a", &b"addr\0x"[..]));
        let m = member(b"b\0");
        assert_eq!((m.id.as_str(), m.data.len()), ("b", 0));
    }
}
