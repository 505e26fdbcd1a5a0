//! The contend driver of the queue rows, shared by the mutex, the election
//! (and so the latch and the selector) and both halves of a semaphore: the
//! engine's verbs as single statements. The loop is the engine's
//! ([`recipes_core::store::engine::contend`]).
//!
//! - **ticket**: a fresh uuid, known before the insert, so that an entry
//!   whose insert reply was lost is still removed.
//! - **enter**: one statement takes the next `seq` from the name's row
//!   (which it locks until commit, so queue order is commit order — a
//!   sequence's would not be: two holders, measured) and inserts our row.
//! - **list**: the live entries up to ours (their session not expired in
//!   database time): ours and the nearest `n` ahead (the rule's holders);
//!   for a read-write lock, ours, the one just ahead and the nearest
//!   writer ahead, each with its `role`.
//! - **wait**: hear of the entry ahead through `LISTEN` (`listen.rs`), and
//!   look at it when told, every poll interval, and once its session's
//!   remaining life is over; resolve once it is gone or expired (or, for
//!   a reader waiting on a writer, once that writer downgraded to a
//!   reader).
//! - **confirm**: the fence bump: `greatest(fence + 1, the database clock in
//!   µs)` on the name's row (so it never goes back, even after the schema
//!   was dropped or truncated), only while
//!   our entry is live and fewer than `n` ahead are (a read-write lock's
//!   reader: no live writer ahead; its writer: no live entry ahead —
//!   exactly core's `Rule::ReadWrite`), judged on the
//!   newest session rows under a share lock (a renewal that commits late
//!   cannot revive an entry the listing saw expire); serialized by the
//!   name's row with other confirms and with fenced writes.
//! - **remove**: delete our row by its uuid (the trigger notifies).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::{ContendDriver, Entered, Listing, Role, Rule};
use recipes_core::store::Backoff;
use recipes_core::{LossReason, LossSignal, Result};
use tokio::time::Instant;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::client::PgClient;
use crate::listen::{next, Heard, Subscription};
use crate::names::{inside_semaphore, other_layout};
use crate::session::Session;
use crate::sql::{fence_floor, violated};

/// One acquisition's driver: the queue of `name`, entries of `kind`.
pub(crate) struct RowContender<'a> {
    pub(crate) client: &'a PgClient,
    /// The queue's name (a recipe's name, or a semaphore's part).
    pub(crate) name: &'a str,
    /// What the name's row must be: `lock` (mutexes and elections) or
    /// `permits`.
    pub(crate) kind: &'static str,
    /// The recipe's queue rule, decided inside the confirming statement.
    pub(crate) rule: Rule,
    /// Our entry's role: a read-write lock's [`Role::Reader`] or
    /// [`Role::Writer`] (stored in its `role` column), else the one role of
    /// the rule's recipe (the column stays NULL).
    pub(crate) role: Role,
    /// A candidate's value (empty for locks and permits).
    pub(crate) value: &'a [u8],
    /// For a user's lock or election named `<sem>/locks` or
    /// `<sem>/leases`, `<sem>`: refused while it is a semaphore. `None`
    /// for a semaphore's own parts.
    pub(crate) outside: Option<&'a str>,
}

/// Names our entry before it exists.
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) client: PgClient,
    pub(crate) session: Arc<Session>,
    pub(crate) entry: Uuid,
}

impl Ticket {
    /// Delete our row; see [`remove_entry`].
    pub(crate) async fn remove(self) {
        remove_entry(&self.client, &self.session, self.entry).await;
    }
}

/// Delete the row of `entry` until done or `session` is lost (its
/// renewals then stop and its end deletes the row, or the row stops
/// counting when it expires).
pub(crate) async fn remove_entry(client: &PgClient, session: &Session, entry: Uuid) {
    let sql = "DELETE FROM recipes.queue WHERE entry = $1";
    let what = format!("[{}] remove entry {entry}", session.label());
    let delete = || async {
        let params: crate::db::Params<'_> = &[(&entry, Type::UUID)];
        client.db().query(&what, sql, params).await.map(drop)
    };
    recipes_core::store::until_done(&what, Backoff::RECOVER, || session.is_lost(), delete).await;
}

/// A contender as the queue shows it: its place and its role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spot {
    pub(crate) seq: i64,
    pub(crate) role: Role,
}

/// The `role` column of an entry of `role`: set only for a read-write
/// lock's entries.
pub(crate) fn role_column(role: Role) -> Option<&'static str> {
    match role {
        Role::Reader => Some("read"),
        Role::Writer => Some("write"),
        _ => None,
    }
}

/// The role of a listed row whose `role` column is `column`, in a queue of
/// entries of `default`'s recipe.
pub(crate) fn role_of(column: Option<&str>, default: Role) -> Role {
    match column {
        Some("read") => Role::Reader,
        Some(_) => Role::Writer,
        None => default,
    }
}

/// Our entry while it contends.
pub(crate) struct RowEntry {
    spot: Spot,
    heard: Option<Subscription>,
}

/// A won entry, ready to be held.
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) ticket: Ticket,
    pub(crate) seq: i64,
    pub(crate) fence: i64,
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

impl RowContender<'_> {
    /// Whether the entry `seq` of our queue is live, and if so how long its
    /// session has left. A reader waits on a writer only while it is one: a
    /// writer that downgraded no longer counts.
    async fn left(&self, seq: i64) -> Result<Option<Duration>> {
        let sql = "SELECT extract(epoch FROM s.expires_at - clock_timestamp())::float8 \
                   FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                   WHERE q.name = $1 AND q.seq = $2 AND s.expires_at > clock_timestamp() \
                     AND ($3::text IS DISTINCT FROM 'read' OR q.role IS DISTINCT FROM 'read')";
        let what = format!("look at entry {seq} of {}", self.name);
        let ours = role_column(self.role);
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&seq, Type::INT8),
            (&ours, Type::TEXT),
        ];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        Ok(row.map(|r| seconds(r.get(0))))
    }

    /// Why the enter of `entry` inserted nothing: its row exists (the
    /// enter was sent again: its `seq`), the name holds another recipe, or
    /// it is inside a semaphore's layout (refused).
    async fn not_entered(&self, entry: &Uuid) -> Result<i64> {
        let sql = "SELECT (SELECT q.seq FROM recipes.queue q WHERE q.name = $1 AND q.entry = $2), \
                          (SELECT n.kind FROM recipes.names n WHERE n.name = $1), \
                          EXISTS (SELECT 1 FROM recipes.names p \
                                  WHERE p.name = $3 AND p.kind = 'semaphore')";
        let what = format!("enter the queue of {}", self.name);
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (entry, Type::UUID),
            (&self.outside, Type::TEXT),
        ];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        let row = row.ok_or_else(|| crate::sql::unexpected("no row from a SELECT"))?;
        let (seq, kind, inside): (Option<i64>, Option<String>, bool) =
            (row.get(0), row.get(1), row.get(2));
        match (seq, self.outside, kind) {
            (Some(seq), _, _) => Ok(seq),
            (None, Some(semaphore), _) if inside => Err(inside_semaphore(self.name, semaphore)),
            (None, _, Some(found)) if found != self.kind => {
                Err(other_layout(self.name, self.kind, &found))
            }
            _ => Err(crate::sql::unexpected("an entry vanished while entering")),
        }
    }
}

impl ContendDriver for RowContender<'_> {
    type Epoch = Arc<Session>;
    type Ticket = Ticket;
    type Entry = RowEntry;
    type Id = Spot;
    type Won = Acquired;

    fn rule(&self) -> Rule {
        self.rule
    }

    fn role(&self, id: &Spot) -> Role {
        id.role
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: the session's end removes the entry",
                self.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<Arc<Session>>> {
        self.client.live_session().await.map(Some)
    }

    fn epoch_signal(&self, epoch: &Arc<Session>) -> LossSignal {
        epoch.epoch().signal()
    }

    fn ticket(&self, epoch: &Arc<Session>) -> Ticket {
        Ticket {
            client: self.client.clone(),
            session: epoch.clone(),
            entry: Uuid::new_v4(),
        }
    }

    async fn enter(&self, epoch: &Arc<Session>, ticket: &mut Ticket) -> Result<Entered<Self>> {
        let sql = "WITH n AS (INSERT INTO recipes.names AS n (name, kind) SELECT $1, $4 \
                     WHERE NOT EXISTS (SELECT 1 FROM recipes.names p \
                                       WHERE p.name = $6 AND p.kind = 'semaphore') \
                     ON CONFLICT (name) DO UPDATE SET next_seq = n.next_seq + 1 \
                     WHERE n.kind = $4 RETURNING next_seq) \
                   INSERT INTO recipes.queue (name, seq, entry, session, value, role) \
                   SELECT $1, n.next_seq, $2, $3, $5, $7 FROM n \
                   ON CONFLICT (entry) DO NOTHING RETURNING seq";
        let db = self.client.db();
        let what = format!("enter the queue of {}", self.name);
        let (name, entry, session) = (&self.name, &ticket.entry, epoch.id());
        let (kind, role) = (&self.kind, role_column(self.role));
        let params: crate::db::Params<'_> = &[
            (name, Type::TEXT),
            (entry, Type::UUID),
            (&session, Type::INT8),
            (kind, Type::TEXT),
            (&self.value, Type::BYTEA),
            (&self.outside, Type::TEXT),
            (&role, Type::TEXT),
        ];
        let entered = match db.query_opt(&what, sql, params).await {
            Err(e) if violated(&e).as_deref() == Some("queue_session_fkey") => {
                // Our session's row is gone (truncated, or the schema made
                // again): so is every lock of it.
                log::info!("[{}] the session's row is gone: {e}", epoch.label());
                epoch.epoch().fire(LossReason::Revoked);
                return Err(e);
            }
            entered => entered?,
        };
        let seq = match entered {
            Some(row) => row.get(0),
            // Our row exists (an enter sent again), or the name is another
            // recipe's or inside a semaphore's.
            None => self.not_entered(entry).await?,
        };
        log::debug!("[{}] {} entered at {seq}", epoch.label(), self.name);
        let spot = Spot {
            seq,
            role: self.role,
        };
        let entry = RowEntry { spot, heard: None };
        Ok((entry, None))
    }

    fn ours<'e>(&self, entry: &'e RowEntry) -> &'e Spot {
        &entry.spot
    }

    async fn list(&self, _epoch: &Arc<Session>, entry: &mut RowEntry) -> Result<Listing<Spot>> {
        let what = format!("read the queue of {}", self.name);
        let seq = &entry.spot.seq;
        let rows = match self.rule.holders() {
            Some(n) => {
                let window = i64::try_from(n).unwrap_or(i64::MAX - 1) + 1;
                let params: crate::db::Params<'_> = &[
                    (&self.name, Type::TEXT),
                    (seq, Type::INT8),
                    (&window, Type::INT8),
                ];
                self.client.db().query(&what, LIST, params).await?
            }
            None => {
                let params: crate::db::Params<'_> = &[(&self.name, Type::TEXT), (seq, Type::INT8)];
                self.client
                    .db()
                    .query(&what, LIST_READ_WRITE, params)
                    .await?
            }
        };
        let spot = |r: &tokio_postgres::Row| Spot {
            seq: r.get(0),
            role: role_of(r.get::<_, Option<&str>>(1), self.role),
        };
        Ok(Listing {
            contenders: rows.iter().rev().map(spot).collect(),
            revision: 0,
        })
    }

    async fn wait(&self, _epoch: &Arc<Session>, entry: &mut RowEntry, ahead: &Spot) -> Result<()> {
        let (ahead, ours) = (ahead.seq, entry.spot.seq);
        if entry.heard.is_none() {
            match self.client.listener().subscribe(self.name).await {
                Ok(s) => entry.heard = Some(s),
                Err(e) => log::debug!("[{}] not listening ({e}); polling", self.name),
            }
        }
        let poll = self.client.poll_interval();
        loop {
            // Heard from the subscription on: this look cannot miss a
            // removal that the listing before it did not show.
            let Some(left) = self.left(ahead).await? else {
                return Ok(());
            };
            let nap = tokio::time::sleep(left.min(poll));
            tokio::pin!(nap);
            loop {
                tokio::select! {
                    () = &mut nap => break,
                    heard = next(&mut entry.heard) => match heard {
                        Heard::Entry(seq) if seq == ahead => break,
                        // Ours changed (deleted, say): read the queue.
                        Heard::Entry(seq) if seq == ours => return Ok(()),
                        Heard::Entry(_) => {}
                        Heard::Missed => break,
                    },
                }
            }
        }
    }

    async fn confirm(
        &self,
        _epoch: &Arc<Session>,
        entry: &mut RowEntry,
        _listing: &Listing<Spot>,
    ) -> Result<Option<i64>> {
        // The listing judged expiry on a snapshot: a renewal that checked
        // its row before the expiry may commit after it (a slow commit),
        // making an entry ahead live again (measured: two holders). So
        // the sessions of ours and of every entry ahead are locked in
        // share mode — waiting for such a renewal, and holding off later
        // ones until this commits — and judged on their newest versions.
        let sql = concat!(
            "WITH ahead AS (SELECT q.seq, q.role, s.expires_at > clock_timestamp() AS live \
                     FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                     WHERE q.name = $1 AND q.seq <= $2 FOR SHARE OF s) \
                   UPDATE recipes.names n SET fence = greatest(n.fence + 1, ",
            fence_floor!(),
            ") \
                   WHERE n.name = $1 \
                     AND EXISTS (SELECT 1 FROM ahead WHERE seq = $2 AND live) \
                     AND (SELECT count(*) FROM ahead WHERE seq < $2 AND live \
                          AND ($4::text IS DISTINCT FROM 'read' OR role IS DISTINCT FROM 'read')) \
                         < $3 \
                   RETURNING n.fence"
        );
        let what = format!("confirm the hold of {}", self.name);
        // A read-write lock's entry holds with none ahead that it counts:
        // a writer counts every entry, a reader only the writers.
        let most = i64::try_from(self.rule.holders().unwrap_or(1)).unwrap_or(i64::MAX);
        let role = role_column(self.role);
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&entry.spot.seq, Type::INT8),
            (&most, Type::INT8),
            (&role, Type::TEXT),
        ];
        let row = self.client.db().query_opt(&what, sql, params).await?;
        Ok(row.map(|r| r.get(0)))
    }

    fn remove(ticket: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        ticket.remove()
    }

    fn won(&self, _epoch: Arc<Session>, ticket: Ticket, entry: RowEntry, fence: i64) -> Acquired {
        Acquired {
            ticket,
            seq: entry.spot.seq,
            fence,
        }
    }
}

/// The live entries up to ours (`$2`) of the queue `$1`, newest first, at
/// most `$3` of them: ours and the rule's holders ahead.
const LIST: &str = "SELECT q.seq, q.role FROM recipes.queue q \
     JOIN recipes.sessions s ON s.id = q.session \
     WHERE q.name = $1 AND q.seq <= $2 AND s.expires_at > clock_timestamp() \
     ORDER BY q.seq DESC LIMIT $3";

/// A read-write lock's window of the live queue up to ours (`$2`), newest
/// first: ours, the entry just ahead and the nearest writer ahead — all
/// that `Rule::ReadWrite` looks at, however many readers are between.
const LIST_READ_WRITE: &str = "WITH live AS (SELECT q.seq, q.role FROM recipes.queue q \
       JOIN recipes.sessions s ON s.id = q.session \
       WHERE q.name = $1 AND q.seq <= $2 AND s.expires_at > clock_timestamp()) \
     SELECT seq, role FROM live \
     WHERE seq = $2 OR seq = (SELECT max(seq) FROM live WHERE seq < $2) \
        OR seq = (SELECT max(seq) FROM live WHERE seq < $2 AND role IS DISTINCT FROM 'read') \
     ORDER BY seq DESC";
