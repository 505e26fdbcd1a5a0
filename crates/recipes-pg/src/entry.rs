//! [`PgEntry`]: a held queue row (lease mode) as core's
//! [`HeldEntry`](recipes_core::store::HeldEntry) — its loss watch, its deletion,
//! and writes fenced by the name's fence and our row.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::{
    watch_held, EntryWatcher, FencedWrite, HeldEntry, LossTrigger, Runtime, StoreEntry,
};
use recipes_core::{Access, FencingToken, Result};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::client::PgClient;
use crate::contend::{remove_entry, Acquired};
use crate::held::{PgHeld, PgLock};
use crate::listen::HeldEar;
use crate::names::{holder, validate_key};
use crate::session::{Registered, Session};
use crate::sql::{is_schema_gone, Encoded};

/// The PostgreSQL side of a [`PgLock`]: our row of `recipes.queue` and its
/// session. Cheap to clone (the guard and its watch each keep one): what
/// the holding keeps is shared, behind one pointer.
#[derive(Clone)]
pub struct PgEntry {
    held: Arc<Holding>,
    /// For a read-write lock's holding, its side: its writes are checked
    /// through the name's gate (`recipes.rw_held`); a reader's need the
    /// name's fence (the last writer's token) at or below ours. `None`:
    /// a mutex's, an election's or a permit's.
    pub(crate) rw: Option<Access>,
}

/// What a [`PgEntry`] keeps, shared by the guard and the row's watch.
#[derive(Debug)]
pub struct Holding {
    pub(crate) client: PgClient,
    pub(crate) session: Arc<Session>,
    pub(crate) entry: Uuid,
    pub(crate) seq: i64,
    /// The fence a write must find on the name's row; `None` for a
    /// permit, whose fences are not ordered against other permits'.
    pub(crate) fence: Option<i64>,
    /// `<name>/<entry>`: the holder, whose first `name_len` bytes are the
    /// queue's name and first `layout_len` where the recipe's own rows are
    /// named (what a fenced write may not touch: `<name>/`, or a permit's
    /// `<semaphore>/`).
    holder: String,
    name_len: usize,
    layout_len: usize,
    /// Our entry registered as owned by the client while the holding
    /// lives (from the acquisition's ticket; see `session.rs`).
    _owned: Option<Registered>,
}

impl std::ops::Deref for PgEntry {
    type Target = Holding;

    fn deref(&self) -> &Holding {
        &self.held
    }
}

impl PgEntry {
    /// Hold the row `a` won and watch it (its deletion is loss). A permit
    /// (`permit`) writes fenced by its row alone, and the layout it guards
    /// is its semaphore's.
    pub(crate) fn held(client: PgClient, name: &str, a: Acquired, permit: bool) -> PgLock {
        PgEntry::hold(client, name, a, permit, None)
    }

    fn hold(client: PgClient, name: &str, a: Acquired, permit: bool, rw: Option<Access>) -> PgLock {
        let Acquired { ticket, seq, fence } = a;
        let session = ticket.session.clone();
        let trigger = session.epoch().trigger().child();
        // `<semaphore>/` of `<semaphore>/leases`, else `<name>/`.
        let layout_len = match name.strip_suffix("leases").filter(|_| permit) {
            Some(semaphore) if semaphore.ends_with('/') => semaphore.len(),
            _ => name.len() + 1,
        };
        let held = Holding {
            client,
            session,
            entry: ticket.entry,
            seq,
            fence: (!permit).then_some(fence),
            holder: holder(name, &ticket.entry),
            name_len: name.len(),
            layout_len,
            _owned: ticket.owned,
        };
        let entry = PgEntry {
            held: Arc::new(held),
            rw,
        };
        let watching = watch_row(entry.clone(), trigger.clone());
        entry.client.runtime().handle().spawn(watching);
        HeldEntry::new(
            PgHeld::Row(entry),
            trigger,
            FencingToken(fence.unsigned_abs()),
        )
    }

    /// Hold the row `a` won in a read-write lock's queue on its `side`.
    pub(crate) fn held_rw(client: PgClient, name: &str, a: Acquired, side: Access) -> PgLock {
        PgEntry::hold(client, name, a, false, Some(side))
    }

    /// Our row's position in the queue.
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// The queue's name.
    pub(crate) fn name(&self) -> &str {
        &self.holder[..self.name_len]
    }

    /// Our row as the client's poll of held rows asks after it: of our
    /// session, and with the name's fence ours for a lock's, a leadership's
    /// or a writer's (not a permit's or a reader's, whose tokens are not the
    /// name's fence). A holding whose row is there but whose name's fence
    /// is another's was lost: the name's row went back with an older backup
    /// restored, to before our confirm, or on to a later holder's.
    fn held_row(&self) -> crate::db::HeldRow {
        let fence = match self.rw {
            None | Some(Access::Write) => self.fence,
            Some(Access::Read) => None,
        };
        crate::db::HeldRow {
            entry: self.entry,
            session: self.session.id(),
            fence,
        }
    }

    /// Whether our row is still there as [`held_row`](PgEntry::held_row)
    /// says: the poll's question, asked of our row alone.
    async fn exists(&self) -> Result<bool> {
        let present = self.client.db().rows_present(vec![self.held_row()]).await?;
        Ok(present.first() == Some(&true))
    }
}

/// What must hold for a fenced write of a lock or leadership, as SQL over
/// `$1` (the name), `$2` (our fence) and `$3` (our entry): the name's row
/// still has our fence, locked in share mode so that no confirm (the next
/// holder's fence bump) runs before the write commits, and our row is
/// live.
const STILL_HELD: &str = "SELECT 1 FROM recipes.names n WHERE n.name = $1 AND n.fence = $2 \
     AND EXISTS (SELECT 1 FROM recipes.queue q JOIN recipes.sessions s ON s.id = q.session \
                 WHERE q.entry = $3 AND s.expires_at > clock_timestamp()) \
     FOR SHARE OF n";

/// The same for a read-write lock's writer: through the name's gate held
/// exclusive to the commit (no reader or writer confirms before it), the
/// name's fence is still ours and our row is live (`contend.sql`).
const STILL_WRITING: &str = "SELECT 1 WHERE recipes.rw_held($1, $2, $3, false)";

/// The same for a read-write lock's reader: through the gate held shared
/// (no writer confirms before the commit), no writer's token above ours
/// (readers mint without writing the name's row) and our row is live.
const STILL_READING: &str = "SELECT 1 WHERE recipes.rw_held($1, $2, $3, true)";

/// The same for a permit (`$2` is NULL): our row is live, and locked in
/// share mode to the commit. Permits are not ordered against each other,
/// so the name's row is not locked: a waiting permit's confirm, which
/// holds the live permits' sessions in share mode while it waits for that
/// row, never waits for a live permit's write. It waits for ours only
/// once our session expired (`contend.sql`: it locks the rows of the
/// expired entries ahead): a write begun while we held commits before
/// another permit is admitted in our place.
///
/// The row is locked first and our session judged after (`locked` is
/// materialized, and the judgement reads each of its rows): a check that
/// judged first and then waited for the lock of a next permit's confirm,
/// which found us expired, would be granted the lock with no second look
/// (a row only locked, not updated, is not read again) and write beside it.
const STILL_PERMITTED: &str = "WITH locked AS MATERIALIZED (SELECT q.session FROM recipes.queue q \
       WHERE q.entry = $3 AND $1::text IS NOT NULL AND $2::int8 IS NULL FOR SHARE OF q) \
     SELECT 1 FROM locked WHERE (SELECT s.expires_at FROM recipes.sessions s \
       WHERE s.id = locked.session) > clock_timestamp()";

impl PgEntry {
    /// What a write fenced by this holding checks first.
    pub(crate) fn check(&self) -> Result<FenceCheck> {
        let sql = match (self.fence, self.rw) {
            (Some(_), None) => STILL_HELD,
            (Some(_), Some(Access::Write)) => STILL_WRITING,
            (Some(_), Some(Access::Read)) => STILL_READING,
            (None, _) => STILL_PERMITTED,
        };
        Ok(FenceCheck {
            sql: sql.to_owned(),
            name: self.name().to_owned(),
            fence: self.fence,
            third: (Encoded::new(&self.entry, &Type::UUID)?, Type::UUID),
        })
    }
}

/// What a fenced write or transaction checks first: SQL over `$1` (the
/// name), `$2` (our fence, NULL for a permit) and `$3` (our entry, or our
/// lock's backend), which returns a row while the holding is ours.
#[derive(Debug, Clone)]
pub(crate) struct FenceCheck {
    pub(crate) sql: String,
    pub(crate) name: String,
    pub(crate) fence: Option<i64>,
    pub(crate) third: (Encoded, Type),
}

impl FenceCheck {
    /// The check's three parameters.
    pub(crate) fn params(&self) -> [(&(dyn ToSql + Sync), Type); 3] {
        [
            (&self.name, Type::TEXT),
            (&self.fence, Type::INT8),
            (&self.third.0, self.third.1.clone()),
        ]
    }
}

/// Run one write fenced by `check`; `false` when the check found the
/// holding gone (nothing was written).
pub(crate) async fn fenced_write(
    client: &PgClient,
    what: &'static str,
    write: &FencedWrite,
    check: &FenceCheck,
) -> Result<bool> {
    let ok = &check.sql;
    let [name, fence, third] = check.params();
    let rows = match write {
        FencedWrite::Put { key, value } => {
            validate_key(key)?;
            let sql = format!(
                "WITH ok AS ({ok}) INSERT INTO recipes.kv (key, value) \
                     SELECT $4, $5 FROM ok ON CONFLICT (key) DO UPDATE \
                     SET value = EXCLUDED.value RETURNING 1"
            );
            let params = [name, fence, third, (key, Type::TEXT), (value, Type::BYTEA)];
            client.db().query(what, &sql, &params).await
        }
        FencedWrite::Delete { key } => {
            validate_key(key)?;
            let sql = format!(
                "WITH ok AS ({ok}), d AS (DELETE FROM recipes.kv \
                     WHERE key = $4 AND EXISTS (SELECT 1 FROM ok)) SELECT 1 FROM ok"
            );
            let params = [name, fence, third, (key, Type::TEXT)];
            client.db().query(what, &sql, &params).await
        }
        FencedWrite::Proclaim { value } => {
            let sql = format!(
                "WITH ok AS ({ok}) UPDATE recipes.queue SET value = $4 \
                     WHERE entry = $3 AND EXISTS (SELECT 1 FROM ok) RETURNING 1"
            );
            let params = [name, fence, third, (value, Type::BYTEA)];
            client.db().query(what, &sql, &params).await
        }
    };
    match rows {
        Ok(rows) => Ok(!rows.is_empty()),
        // The schema was dropped, our fence with it.
        Err(e) if is_schema_gone(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

impl StoreEntry for PgEntry {
    fn runtime(&self) -> &Runtime {
        self.client.runtime()
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn session_id(&self) -> i64 {
        self.session.id()
    }

    fn label(&self) -> &str {
        self.session.label()
    }

    /// Everything below the recipe's name (for a permit, its semaphore's),
    /// where holders are named.
    fn inside_layout(&self, key: &str) -> Option<&str> {
        let root = &self.holder[..self.layout_len];
        key.starts_with(root).then_some(root)
    }

    async fn delete(self) -> Result<()> {
        let sql = crate::contend::release_sql(self.rw.is_none());
        let what = format!("release {}", self.holder);
        let db = self.client.db();
        db.query(&what, sql, &[(&self.entry, Type::UUID)])
            .await
            .map(drop)
    }

    async fn delete_until_done(self) {
        remove_entry(&self.client, &self.session, self.entry, self.rw.is_none()).await
    }

    async fn write(self, what: &'static str, write: FencedWrite) -> Result<()> {
        if !fenced_write(&self.client, what, &write, &self.check()?).await? {
            return Err(self.rejected(what));
        }
        Ok(())
    }
}

impl PgEntry {
    /// The refusal of a write once the holding is gone.
    pub(crate) fn rejected(&self, what: &str) -> recipes_core::Error {
        recipes_core::Error::FenceRejected {
            what: format!(
                "{what}: {} is gone, or the fence of {} moved past {}",
                self.holder,
                self.name(),
                self.fence.map_or("ours".to_owned(), |f| f.to_string())
            ),
        }
    }
}

/// One watch of our row: its ear on the name's channel (the client's one
/// poll of the rows it holds is reached through the entry's client).
pub struct RowWatch {
    heard: Option<HeldEar>,
    entry: PgEntry,
}

impl PgEntry {
    /// Listen on the name's channel for our row (no statement once it is
    /// listened to), without a look at it.
    async fn row_watch(&self) -> RowWatch {
        let heard = match self
            .client
            .listener()
            .hear_held(self.name(), self.seq)
            .await
        {
            Ok(ear) => Some(ear),
            Err(e) => {
                log::debug!("[{}] not listening ({e}); polling", self.session.label());
                None
            }
        };
        RowWatch {
            heard,
            entry: self.clone(),
        }
    }
}

/// A held row's watch, the one task each held row keeps for its life:
/// loss (`trigger`) when the row is gone.
async fn watch_row(own: PgEntry, trigger: LossTrigger) {
    let label = own.session.label();
    // The statement that confirmed the hold saw our row: the watch starts
    // from there, without a look of its own (a deletion before the channel
    // is listened to is seen by the poll). Boxed: the task waits in
    // `deleted` nearly all its life.
    let watch = Box::pin(own.row_watch()).await;
    watch_held(&own, label, own.holder(), Some(watch), &trigger).await;
}

impl EntryWatcher for PgEntry {
    type Watch = RowWatch;

    /// Listen on the name's channel, then look at our row (the first
    /// watch needs no look: the statement that confirmed the hold saw the row).
    async fn watch(&self) -> Result<Option<RowWatch>> {
        let watch = self.row_watch().await;
        Ok(self.exists().await?.then_some(watch))
    }

    /// Our row's deletion, heard (a change of our row: look at it) or
    /// seen by the client's one poll of the rows it holds.
    async fn deleted(watch: &mut RowWatch) -> Result<()> {
        let entry = &watch.entry;
        let polled = entry.client.held_rows().gone(entry.held_row());
        tokio::pin!(polled);
        loop {
            tokio::select! {
                () = &mut polled => return Ok(()),
                () = HeldEar::changed(&watch.heard) => {}
            }
            // Boxed: a look's future would make every held entry's task
            // as large, for the moments it runs.
            if !Box::pin(entry.exists()).await? {
                return Ok(());
            }
        }
    }
}

impl fmt::Debug for PgEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgEntry")
            .field("holder", &self.holder)
            .field("seq", &self.seq)
            .field("fence", &self.fence)
            .finish()
    }
}

impl fmt::Debug for RowWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowWatch")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it.
    fn returned<A, B, R>(_: impl Fn(A, B) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// Each held row keeps its watch task (this future, inline) for its
    /// whole life: a statement's future inside it (15 KiB in a debug
    /// build) would make every held lock that large (issue 25 item 1).
    /// 840 bytes in a debug build when written (1,392 while `PgEntry` was
    /// inline, 96 bytes).
    #[test]
    fn a_held_rows_watch_stays_small() {
        let (task, entry) = (returned(watch_row), std::mem::size_of::<PgEntry>());
        eprintln!("watch task future: {task} bytes; PgEntry: {entry} bytes");
        assert!(task <= 1024, "watch task future: {task} bytes");
        assert!(entry <= 16, "PgEntry: {entry} bytes");
    }
}
