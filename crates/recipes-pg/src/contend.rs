//! The contend driver of the queue rows, shared by the mutex, the election
//! (and so the latch and the selector) and both halves of a semaphore: the
//! engine's verbs as single statements. The loop is the engine's
//! ([`recipes_core::store::engine::contend`]).
//!
//! - **ticket**: a fresh uuid, known before the insert, so that an entry
//!   whose insert reply was lost is still removed.
//! - **enter**: one statement (`recipes.enter`, `contend.sql`) takes the
//!   next `seq` from the name's row (which it locks until commit, so queue
//!   order is commit order — a sequence's would not be: two holders,
//!   measured), inserts our row and looks, as below, in the same
//!   transaction: an uncontended acquisition is this one statement.
//! - **list** (a look, `recipes.look`): when fewer than the rule's holders
//!   are live ahead of ours, the confirm; else the live entries up to ours
//!   (their session not expired in database time): ours and the nearest
//!   `n` ahead (the rule's holders); for a read-write lock, ours, the one
//!   just ahead and the nearest writer ahead, each with its `role`.
//! - **wait**: hear of the entry ahead through `LISTEN` (`listen.rs`), and
//!   look at it every poll interval and once its session's remaining life
//!   is over; resolve when told of it (the next look is the handoff's one
//!   statement), or once it is gone or expired (or, for a reader waiting
//!   on a writer, once that writer downgraded to a reader).
//! - **confirm**: the fence bump the look that found ours holding made:
//!   `greatest(fence + 1, the database clock in µs)` on the name's row (so
//!   it never goes back, even after the schema was dropped or truncated),
//!   only while our entry is live and fewer than `n` ahead are (a
//!   read-write lock's reader: no live writer ahead; its writer: no live
//!   entry ahead — exactly core's `Rule::ReadWrite`), judged on the newest
//!   session rows under a share lock (a renewal that commits late cannot
//!   revive an entry the listing saw expire); serialized by the name's row
//!   with other confirms and with fenced writes. Each statement of the
//!   functions takes a fresh snapshot, so the confirm, run after the
//!   name's row was locked, sees every entry ahead of ours. A read-write
//!   lock's entries pass the name's gate instead (`recipes.rw_gate`:
//!   shared for readers, exclusive for writers), and take their `seq` and
//!   token from `recipes.rw_order` behind it: readers do not wait for
//!   each other's commits.
//! - **remove**: delete our row by its uuid (the trigger notifies): a
//!   plain `DELETE` for a row whose `role` is NULL, `recipes.release` for a
//!   read-write lock's ([`release_sql`]).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::{ContendDriver, Entered, Listing, Role, Rule};
use recipes_core::store::Backoff;
use recipes_core::{LossSignal, Result};
use tokio::time::Instant;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::client::PgClient;
use crate::listen::{next, Heard, Subscription};
use crate::names::{inside_semaphore, other_layout};
use crate::session::{session_row_gone, Registered, Session};

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
    /// Whether our row's `role` is NULL (every recipe's but a read-write
    /// lock's): see [`release_sql`].
    pub(crate) plain: bool,
    /// Our entry registered as owned by this client while the ticket
    /// lives (`session.rs`: the client releases the entries of its session
    /// that no ticket owns). None once the client closed.
    pub(crate) owned: Option<Registered>,
}

impl Ticket {
    /// Delete our row; see [`remove_entry`].
    pub(crate) async fn remove(self) {
        remove_entry(&self.client, &self.session, self.entry, self.plain).await;
    }
}

/// The statement that releases an entry, `plain` when its `role` is NULL
/// (a mutex's, an election's, a permit's: it never becomes a reader's).
/// Such a row is deleted by a plain statement: `recipes.release` would
/// only add its `recipes.releasing` setting, which the trigger's `WHEN`
/// reads for a reader's row alone (`OLD.role IS DISTINCT FROM 'read'` is
/// already true), and its reader's notify; the same delete and the same
/// trigger, without a PL/pgSQL call (measured: 39-44 against 66-93 µs of
/// server time). A read-write lock's entry goes through `recipes.release`.
///
/// Either commits without waiting for the disk (`synchronous_commit` off
/// for its own transaction, which a transaction pooler keeps). A released
/// guard makes no more writes (every fenced write goes through it), so a
/// release a server crash lost cannot give two writers; and any later
/// commit that waits for the disk writes the log up to it, our delete
/// included. What a crash can lose is a release no later commit flushed:
/// the row is back, of our live session and owned by nothing of ours, and
/// the client's audit of its session releases it within about a TTL
/// (`session.rs`).
pub(crate) fn release_sql(plain: bool) -> &'static str {
    if plain {
        "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) \
         DELETE FROM recipes.queue WHERE entry = $1 AND EXISTS (SELECT 1 FROM lazy)"
    } else {
        "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) \
         SELECT FROM lazy, recipes.release($1)"
    }
}

/// Delete the row of `entry` (`plain`: its `role` is NULL, see
/// [`release_sql`]) until done or `session` is lost (its renewals then stop
/// and its end deletes the row, or the row stops counting when it
/// expires).
pub(crate) async fn remove_entry(client: &PgClient, session: &Session, entry: Uuid, plain: bool) {
    let sql = release_sql(plain);
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
    /// Our row's uuid: ours is the row at our seq *with* it (a seq may be
    /// drawn again after the name's row was lost; `contend.sql`).
    entry: Uuid,
    heard: Option<Subscription>,
    /// The fence the last look minted: it found ours holding and
    /// confirmed it in the same statement.
    fence: Option<i64>,
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
    /// How many entries may hold at once (1 for a read-write lock, whose
    /// look counts by role).
    fn most(&self) -> i64 {
        i64::try_from(self.rule.holders().unwrap_or(1)).unwrap_or(i64::MAX)
    }

    /// A look's rows (`recipes.look`: `seq`, `role`, `fence`, newest
    /// first) as a listing; a minted fence is kept for the confirm.
    fn looked(&self, entry: &mut RowEntry, rows: &[tokio_postgres::Row]) -> Listing<Spot> {
        entry.fence = rows.iter().find_map(|r| r.get::<_, Option<i64>>(2));
        let spot = |r: &tokio_postgres::Row| Spot {
            seq: r.get(0),
            role: role_of(r.get::<_, Option<&str>>(1), self.role),
        };
        Listing {
            contenders: rows.iter().rev().map(spot).collect(),
            revision: 0,
        }
    }

    /// Whether any entry ahead of ours going may let ours hold: a
    /// semaphore's permits, released in any order (the rule names only the
    /// one `n` places ahead, which may be the last to go).
    fn any_ahead_admits(&self) -> bool {
        self.rule.holders().is_some_and(|n| n > 1)
    }

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
        let entry = Uuid::new_v4();
        Ticket {
            client: self.client.clone(),
            session: epoch.clone(),
            entry,
            plain: role_column(self.role).is_none(),
            owned: epoch.store_ref().ok().map(|s| s.register(entry)),
        }
    }

    async fn enter(&self, epoch: &Arc<Session>, ticket: &mut Ticket) -> Result<Entered<Self>> {
        // The enter's waits for locks (the name's row, a read-write lock's
        // gate) end at the server before the call's timeout ends here:
        // an enter given up here and undone (its entry not there yet)
        // must not commit its entry later, under our live session, where
        // no guard owns it. Set first (`t`, which the call reads), for
        // this statement's transaction only.
        let sql = "SELECT r.r_seq, r.r_role, r.r_fence \
                   FROM (SELECT $1::text AS name, set_config('lock_timeout', $9, true)) AS t, \
                   LATERAL recipes.enter(t.name, $2, $3, $4, $5, $6, $7, $8) AS r";
        let db = self.client.db();
        let what = format!("enter the queue of {}", self.name);
        let (name, entry, session) = (&self.name, &ticket.entry, epoch.id());
        let (kind, role, most) = (&self.kind, role_column(self.role), self.most());
        let bound = self.client.lock_wait_bound();
        let params: crate::db::Params<'_> = &[
            (name, Type::TEXT),
            (entry, Type::UUID),
            (&session, Type::INT8),
            (kind, Type::TEXT),
            (&self.value, Type::BYTEA),
            (&self.outside, Type::TEXT),
            (&role, Type::TEXT),
            (&most, Type::INT8),
            (&bound, Type::TEXT),
        ];
        let rows = match db.query(&what, sql, params).await {
            // Our session's row is gone (truncated, or the schema made
            // again): so is every lock of it.
            Err(e) if session_row_gone(epoch, &e) => return Err(e),
            rows => rows?,
        };
        let (seq, looked) = match rows.split_first() {
            // Ours, then the look that followed it.
            Some((first, looked)) => (first.get(0), Some(looked)),
            // Our row exists (an enter sent again), or the name is another
            // recipe's or inside a semaphore's: the engine reads the queue.
            None => (self.not_entered(entry).await?, None),
        };
        log::debug!("[{}] {} entered at {seq}", epoch.label(), self.name);
        let spot = Spot {
            seq,
            role: self.role,
        };
        let mut entry = RowEntry {
            spot,
            entry: ticket.entry,
            heard: None,
            fence: None,
        };
        let listing = looked.map(|rows| self.looked(&mut entry, rows));
        Ok((entry, listing))
    }

    fn ours<'e>(&self, entry: &'e RowEntry) -> &'e Spot {
        &entry.spot
    }

    async fn list(&self, _epoch: &Arc<Session>, entry: &mut RowEntry) -> Result<Listing<Spot>> {
        let sql = "SELECT r_seq, r_role, r_fence FROM recipes.look($1, $2, $3, $4, $5)";
        let what = format!("read the queue of {}", self.name);
        let (role, most) = (role_column(self.role), self.most());
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&entry.spot.seq, Type::INT8),
            (&role, Type::TEXT),
            (&most, Type::INT8),
            (&entry.entry, Type::UUID),
        ];
        let rows = self.client.db().query(&what, sql, params).await?;
        Ok(self.looked(entry, &rows))
    }

    async fn wait(&self, _epoch: &Arc<Session>, entry: &mut RowEntry, ahead: &Spot) -> Result<()> {
        let (ahead, ours) = (ahead.seq, entry.spot.seq);
        if entry.heard.is_none() {
            match self.client.listener().subscribe(self.name).await {
                Ok(s) => entry.heard = Some(s),
                Err(e) => log::debug!("[{}] not listening ({e}); polling", self.name),
            }
            // A permit: any entry ahead may have gone since the listing,
            // and the look below sees only the one `n` places ahead: read
            // the queue again, heard from now on.
            if entry.heard.is_some() && self.any_ahead_admits() {
                return Ok(());
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
                    () = &mut nap => {
                        // A permit polls the whole queue, for the same
                        // reason.
                        if self.any_ahead_admits() {
                            return Ok(());
                        }
                        break;
                    }
                    heard = next(&mut entry.heard) => match heard {
                        // Gone, most likely (or changed: a writer that
                        // downgraded): the engine's next look says, and
                        // confirms ours in the same statement if it holds.
                        Heard::Entry(seq) if seq == ahead => return Ok(()),
                        // Ours changed (deleted, say): read the queue.
                        Heard::Entry(seq) if seq == ours => return Ok(()),
                        // A permit: any holder ahead going may admit ours,
                        // not only the one `n` places ahead that we look at.
                        Heard::Entry(seq) if self.any_ahead_admits() && seq < ours => {
                            return Ok(())
                        }
                        Heard::Entry(_) => {}
                        Heard::Missed if self.any_ahead_admits() => return Ok(()),
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
        // The look that showed ours holding confirmed it in the same
        // statement (see `recipes.look`).
        if let Some(fence) = entry.fence.take() {
            return Ok(Some(fence));
        }
        // A look mints the fence whenever its listing shows ours holding;
        // this runs only when it did not (a look that found ours holding
        // after its confirm failed, a race with an entry ahead that went
        // in between): confirm again, as that look would have.
        let sql = "SELECT r_fence FROM recipes.look($1, $2, $3, $4, $5) WHERE r_fence IS NOT NULL";
        let what = format!("confirm the hold of {}", self.name);
        let (role, most) = (role_column(self.role), self.most());
        let params: crate::db::Params<'_> = &[
            (&self.name, Type::TEXT),
            (&entry.spot.seq, Type::INT8),
            (&role, Type::TEXT),
            (&most, Type::INT8),
            (&entry.entry, Type::UUID),
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
