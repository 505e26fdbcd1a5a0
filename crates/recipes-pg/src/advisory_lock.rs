//! [`AdvisoryLock`]: a held advisory lock (session mode), the store side
//! of core's [`StoreEntry`](recipes_core::store::StoreEntry) through [`PgHeld`]: its loss is its lock session's (`advisory.rs`: the
//! heartbeat's `pg_locks` check and its check of the name's row — the one
//! this holding's fenced writes need —, the connection's end, the
//! deadline), its
//! release unlocks on that connection, and its writes are fenced by the
//! name's fence and by `pg_locks` showing the lock on our backend (by its
//! PID and its start).

use std::fmt;
use std::sync::Arc;

use recipes_core::store::{within, FencedWrite, HeldEntry};
use recipes_core::{Error, FencingToken, LossReason, LossSignal, Result};
use tokio_postgres::types::Type;

use crate::advisory::{LockConn, LockSession};
use crate::client::PgClient;
use crate::entry::{fenced_write, FenceCheck};
use crate::held::{PgHeld, PgLock};
use crate::slots::Won;
use crate::sql::{from_pg, Encoded};

/// The class of every gate (a two-int transaction-scoped advisory lock):
/// `'recw'`, the class of lease mode's `recipes.rw_gate` (`contend.sql`),
/// which no client's namespace may be (`builder.rs`, `RW_GATE_CLASS`).
macro_rules! gate_class {
    () => {
        "1919247223"
    };
}
pub(crate) use gate_class;

/// A read-write lock's gate over `$1` (the name), held exclusive to the
/// end of the transaction: the class lease mode's gate uses
/// (`recipes.rw_gate`), which a session-mode reader's mint takes shared
/// (`mint.rs`).
pub(crate) const GATE: &str = concat!("pg_advisory_xact_lock(", gate_class!(), ", hashtext($1))");

/// A session-mode permit's slot gate, as SQL that holds it exclusive to
/// the end of the statement when `$kind` is `advisory-permits`
/// ([`crate::slots::ADVISORY_PERMITS`]): the class of [`GATE`], keyed by
/// `$hash`, the hash of the permit's key's name (`<sem>/leases/<i>`, a
/// name no read-write lock has: a name inside a semaphore's layout is
/// refused; a read-write lock's name of the same hash only adds waiting,
/// as colliding advisory keys do). A permit's fenced write or transaction takes it shared before
/// its check ([`AdvisoryLock::check`]); the next holder of the key mints
/// its fence under it (`mint.rs`), so it waits for every such transaction
/// begun while the permit held, as a mutex's next mint waits for the
/// name's row its holder's check locked. Like that row lock's, the wait
/// is not sliced by the take's `lock_timeout`: a take or a confirm waits
/// for such a transaction to end, up to the RPC timeout at the client.
macro_rules! slot_gate {
    ($hash:expr, $kind:expr) => {
        concat!(
            "(SELECT count(*) FROM (SELECT pg_advisory_xact_lock(",
            $crate::advisory_lock::gate_class!(),
            ", ",
            $hash,
            ") WHERE ",
            $kind,
            " = 'advisory-permits') g) >= 0"
        )
    };
}
pub(crate) use slot_gate;

/// What a holding's heartbeat asks of its name's row in `recipes.names`,
/// the row its fenced writes check ([`AdvisoryLock::check`]): there, with
/// its fence in a range.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fence {
    /// A mutex's or a writer's: the fence is ours.
    At(i64),
    /// A reader's: no writer's token above ours.
    AtMost(i64),
    /// A permit's: the semaphore's row is there.
    Any,
}

impl Fence {
    /// The lowest and highest fence the row may hold.
    pub(crate) fn range(self) -> (i64, i64) {
        match self {
            Fence::At(f) => (f, f),
            Fence::AtMost(f) => (i64::MIN, f),
            Fence::Any => (i64::MIN, i64::MAX),
        }
    }
}

/// The PostgreSQL side of a session-mode [`PgLock`]: an advisory lock
/// held by a backend of its own. Its holder reads
/// `<key name>/backend-<pid>`.
#[derive(Clone)]
pub struct AdvisoryLock {
    pub(crate) client: PgClient,
    pub(crate) session: Arc<LockSession>,
    conn: Arc<LockConn>,
    /// The name whose row holds the fence.
    name: String,
    /// The key as `pg_locks.objid` shows it, and by name.
    key: i64,
    key_name: String,
    /// Our heartbeat row in `recipes.advisory`: the key's name, or a
    /// read-write lock reader's own (`slots::reader_row`).
    beat_row: String,
    /// A read-write lock's reader: its writes need the name's fence (the
    /// last writer's token) at or below ours.
    reading: bool,
    /// A read-write lock's writer: its checks take the name's gate
    /// exclusive first ([`GATE`]), which a reader's mint takes shared, so
    /// no reader holds before a write fenced by a writer's check commits.
    gated: bool,
    /// `None` for a permit, whose fences are not ordered against other
    /// permits'.
    fence: Option<i64>,
    holder: String,
    layout: String,
    /// The holding's loss: once it fired, writes are refused here, before
    /// anything is sent (a terminated backend still shows its locks in
    /// `pg_locks` while it exits).
    lost: LossSignal,
}

impl AdvisoryLock {
    /// Hold what `won` took for the recipe `recipe` (for a permit, its
    /// semaphore), losing it when its lock session is lost.
    pub(crate) fn held(
        client: PgClient,
        recipe: &str,
        name: &str,
        won: Won,
        permit: bool,
    ) -> PgLock {
        let trigger = won.session.epoch().trigger().child();
        won.conn.watch(trigger.clone());
        let lock = AdvisoryLock {
            lost: trigger.signal(),
            client,
            holder: format!("{}/backend-{}", won.key_name, won.conn.pid),
            key_name: won.key_name,
            beat_row: won.beat_row,
            reading: won.shared,
            gated: won.writer,
            session: won.session,
            conn: won.conn,
            name: name.to_owned(),
            key: won.key,
            fence: (!permit).then_some(won.fence),
            layout: format!("{recipe}/"),
        };
        HeldEntry::new(
            PgHeld::Advisory(lock),
            trigger,
            FencingToken(won.fence.unsigned_abs()),
        )
    }

    /// Clear the heartbeat row of our key, while we hold it (so a next
    /// holder knows it need not wait for our deadline); a reader's own row
    /// goes. Committed without waiting for the disk
    /// (`synchronous_commit` off for this statement's transaction): a
    /// clear lost in a server crash only makes the next holder wait out
    /// our deadline, as after an unclean end, so the release need not pay
    /// a flush. Heartbeats sent from now on leave the row alone. Not when
    /// the holding was lost before its release: its lock session may have
    /// been revoked, the key unlocked and the connection handed to another
    /// acquisition, and the key's row be the next holder's.
    async fn released_cleanly(&self) -> Result<()> {
        if self
            .lost
            .reason()
            .is_some_and(|r| r != LossReason::Released)
        {
            return Ok(());
        }
        self.conn.unbeat(self.key);
        let what = "mark a clean release";
        let sql = match self.beat_row == self.key_name {
            true => {
                "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) \
                 UPDATE recipes.advisory SET beat_at = NULL \
                 WHERE key = $1 AND EXISTS (SELECT 1 FROM lazy)"
            }
            false => {
                "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) \
                 DELETE FROM recipes.advisory WHERE key = $1 AND EXISTS (SELECT 1 FROM lazy)"
            }
        };
        let c = self.conn.on();
        within(what, self.client.rpc_timeout(), async {
            c.query(sql, &[(&self.beat_row, Type::TEXT)])
                .await
                .map_err(|e| from_pg(what, e))
        })
        .await
        .map(drop)
    }

    /// The PID of the backend that holds the lock.
    pub fn backend_pid(&self) -> i32 {
        self.conn.pid
    }

    /// What a write fenced by this holding checks first: the name's fence
    /// is ours (a reader's: no writer's above ours), under a share lock, so
    /// no later holder's fence exists before the write commits, and our
    /// backend holds our key.
    ///
    /// # Errors
    ///
    /// [`Error::FenceRejected`] once the holding's loss fired.
    pub(crate) fn check(&self) -> Result<FenceCheck> {
        if self.lost.is_lost() {
            return Err(self.rejected("a fenced write after the lock was lost"));
        }
        if self.fence.is_none() {
            // A permit's write may reach the server after its release: its
            // connection takes no other acquisition's key.
            self.conn.spend();
        }
        let (ns, key) = (self.client.namespace(), self.key);
        let started = self
            .conn
            .shown_start
            .map_or("NULL".into(), |s| s.to_string());
        // Our backend: the PID's, if it started when ours did (once ours
        // ended, a later backend may be given its PID, and our key).
        let ours = format!(
            concat!(
                "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
                 AND l.objsubid = 2 AND l.classid::int8 = {ns} AND l.objid::int8 = {key} \
                 AND l.pid = $3 AND l.granted) AND ",
                our_backend!("$3", "{started}::int8")
            ),
            ns = ns,
            key = key,
            started = started
        );
        // A reader's token is not the name's fence: no writer minted after
        // it (a writer's token is the fence; a downgraded writer's read
        // keeps its own).
        let at = if self.reading { "<=" } else { "=" };
        let sql = match self.fence {
            // The gate first (an uncorrelated subquery runs when the CASE
            // first needs it), then the checks: a reader granted once our
            // backend lost the key mints behind the gate, after our write
            // committed; ours, once the gate is ours, sees that loss in
            // `pg_locks`, which is read live, and a writer's fence bump
            // since our snapshot through the row lock's recheck.
            Some(_) if self.gated => format!(
                "SELECT 1 FROM recipes.names n WHERE n.name = $1 AND CASE \
                 WHEN (SELECT count(*) FROM (SELECT {GATE}) g) = 1 \
                 THEN n.fence = $2 AND {ours} END FOR SHARE OF n"
            ),
            Some(_) => format!(
                "SELECT 1 FROM recipes.names n WHERE n.name = $1 AND n.fence {at} $2 \
                 AND {ours} FOR SHARE OF n"
            ),
            // A permit's: its semaphore's row still there, of session
            // mode's kind. The heartbeats ask that the row be there
            // (`advisory.rs`): a permit whose row was lost (a truncate, a
            // schema dropped) loses at its next one. Its slot's
            // gate first, shared (`slot_gate!`), then the checks: a next
            // holder of our key that minted before it is seen holding the
            // key; one that mints after waits for our commit.
            None => format!(
                concat!(
                    "SELECT 1 FROM recipes.names n WHERE n.name = $1 AND $2::int8 IS NULL \
                     AND n.kind = 'advisory-permits' AND CASE \
                     WHEN (SELECT count(*) FROM (SELECT pg_advisory_xact_lock_shared(",
                    gate_class!(),
                    ", {slot})) g) = 1 THEN {ours} END"
                ),
                slot = key as u32 as i32,
                ours = ours
            ),
        };
        Ok(FenceCheck {
            sql,
            name: self.name.clone(),
            fence: self.fence,
            third: (Encoded::new(&self.conn.pid, &Type::INT4)?, Type::INT4),
        })
    }

    /// The refusal of a write once the holding is gone.
    pub(crate) fn rejected(&self, what: &str) -> Error {
        Error::FenceRejected {
            what: format!(
                "{what}: {} no longer holds its advisory lock, or the fence of {} moved past {}",
                self.holder,
                self.name,
                self.fence.map_or("ours".to_owned(), |f| f.to_string())
            ),
        }
    }
}

/// What [`PgHeld`]'s [`StoreEntry`] asks of a session-mode holding (the
/// runtime and the RPC timeout are the client's).
impl AdvisoryLock {
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// The backend's PID.
    pub(crate) fn session_id(&self) -> i64 {
        self.session.id()
    }

    pub(crate) fn label(&self) -> &str {
        self.session.label()
    }

    pub(crate) fn inside_layout(&self, key: &str) -> Option<&str> {
        let root = self.layout.as_str();
        key.starts_with(root).then_some(root)
    }

    /// Clear our heartbeat row (a clean release: the next holder need not
    /// wait out our deadline), then unlock on the lock connection (which
    /// then serves another acquisition): the two sent together, in that
    /// order, on the one connection, which the server answers in order (the
    /// clear is committed before the key is free), so a release costs one
    /// round trip.
    pub(crate) async fn delete(self) -> Result<()> {
        // Biased: the clear is polled, and so sent, first.
        let (cleared, unlocked) = tokio::join!(
            biased;
            self.released_cleanly(),
            self.session.revoke(LossReason::Released)
        );
        cleared.and(unlocked)
    }

    pub(crate) async fn delete_until_done(self) {
        if let Err(e) = self.released_cleanly().await {
            log::debug!(
                "[{}] {}: {e}; its heartbeat row stays",
                self.label(),
                self.holder
            );
        }
        self.session.end(LossReason::Released).await
    }

    pub(crate) async fn write(self, what: &'static str, write: FencedWrite) -> Result<()> {
        if let FencedWrite::Proclaim { .. } = write {
            // Elections run on queue rows in both modes.
            return Err(crate::sql::unexpected("a proclaim on an advisory lock"));
        }
        if !fenced_write(&self.client, what, &write, &self.check()?).await? {
            return Err(self.rejected(what));
        }
        Ok(())
    }
}

impl fmt::Debug for AdvisoryLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisoryLock")
            .field("holder", &self.holder)
            .field("key", &self.key)
            .field("fence", &self.fence)
            .finish()
    }
}

impl AdvisoryLock {
    /// Take our key shared on the same backend (granted at once: a
    /// backend's own locks never conflict) and unlock the exclusive hold,
    /// in one statement, so no heartbeat sees the key twice; then our
    /// heartbeat row becomes a reader's and the heartbeats ask of the name's
    /// row what a reader's writes do (no writer's token above ours). Readers waiting at the server
    /// are granted then; a writer waiting stays behind them.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the exclusive lock was not ours any more;
    /// backend errors.
    pub(crate) async fn downgrade(self) -> Result<AdvisoryLock> {
        let what = format!("downgrade {}", self.holder);
        let row = crate::slots::reader_row(&self.key_name, &self.conn);
        // Heartbeats from now on stamp the reader's row.
        self.conn.rebeat(self.key, &row);
        if let Some(token) = self.fence {
            self.conn.fenced(&self.name, Fence::AtMost(token));
        }
        let sql = "WITH moved AS (INSERT INTO recipes.advisory (key, beat_at, ttl) \
                     SELECT $4, beat_at, ttl FROM recipes.advisory WHERE key = $3 \
                     ON CONFLICT (key) DO UPDATE SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl), \
                   cleared AS (UPDATE recipes.advisory SET beat_at = NULL WHERE key = $3) \
                   SELECT pg_advisory_lock_shared($1, hashtext($3))::text, \
                          pg_advisory_unlock($1, hashtext($3)) AND $2::int4 IS NOT NULL";
        let ns = self.client.namespace() as i32;
        let params: crate::db::Params<'_> = &[
            (&ns, Type::INT4),
            (&self.conn.pid, Type::INT4),
            (&self.key_name, Type::TEXT),
            (&row, Type::TEXT),
        ];
        let c = &self.conn.client;
        let rows = within(&what, self.client.rpc_timeout(), async {
            c.query_typed(sql, params)
                .await
                .map_err(|e| from_pg(&what, e))
        })
        .await?;
        if !rows.first().is_some_and(|r| r.get::<_, bool>(1)) {
            return Err(Error::NotHeld {
                what: format!("{what}: the exclusive lock was no longer ours"),
            });
        }
        Ok(AdvisoryLock {
            beat_row: row,
            reading: true,
            gated: false,
            ..self
        })
    }
}
