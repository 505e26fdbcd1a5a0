//! Session mode's acquisitions as core's
//! [`SlotDriver`](recipes_core::store::engine::SlotDriver): the loop is the
//! engine's ([`recipes_core::store::engine::take`]).
//!
//! - **epoch**: a lock connection of this acquisition's own
//!   (`advisory.rs`), ended (its locks unlocked, the connection kept idle)
//!   on every way out but a win.
//! - **take**: `pg_try_advisory_lock(namespace, hashtext(key))`, or
//!   `pg_advisory_lock` under a `lock_timeout` of the slice, so no server
//!   call outlives the caller's deadline; in the same statement, only when
//!   the name's row (if any) is of this mode and recipe, so a refused name's
//!   key is never taken (nothing to give back). A mutex's or a permit's
//!   try also mints the fence and stamps our heartbeat in that statement
//!   (`mint::take_and_mint`: the uncontended acquisition is one round
//!   trip), leaving to **confirm** only a previous holder's deadline to
//!   wait out. A mutex is one key (its name); a
//!   semaphore of N permits is N keys `<name>/leases/<i>`; a read-write
//!   lock is its name's key, taken `_shared` by a reader, and waits in one
//!   statement until the deadline (see [`SlotDriver::slice`] below): a
//!   wait cut short would let the readers queued behind a waiting writer
//!   pass it.
//! - **confirm**: the fence (already minted by a mutex's or a permit's
//!   try), bumped on the name's row of `recipes.names` in the same session
//!   right after the grant (`INSERT … ON CONFLICT … DO UPDATE`) to
//!   `greatest(fence + 1, the database clock in µs)`, so it strictly
//!   increases across holders, even after the schema was dropped or
//!   truncated. A read-write lock's token is the next of
//!   `recipes.rw_order` instead (a writer's also set as the name's fence),
//!   drawn while the key is held: a writer holds it alone, so its token
//!   is above every earlier reader's and below every later one's, and
//!   readers, who leave the row alone, mint together rather than one
//!   commit after another on the row lock; and, when the key's previous
//!   holder ended without releasing it (its heartbeat row in
//!   `recipes.advisory` not cleared), a wait until that holder's last
//!   heartbeat + its TTL — its own deadline — has passed, so a holder
//!   whose backend was terminated has lost before the next one holds. The row's kind (`advisory`,
//!   `advisory-permits`) keeps a name to one mode: a name used in lease
//!   mode is refused in session mode and the other way round, since the
//!   two modes' locks do not exclude each other.
//! - **give back**: the epoch's end — `pg_advisory_unlock_all()` on the
//!   same connection, so it runs after a take still in flight (a take
//!   granted after the caller gave up is undone in order).

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::engine::SlotDriver;
use recipes_core::{LossReason, LossSignal, Result};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use crate::advisory::{LockConn, LockConns, LockSession};
use crate::advisory_lock::Fence;
use crate::client::PgClient;
use crate::mint::{mint_fence, refusal, remaining, take_and_mint, Beat, Minted, Tried};
use crate::sql::{from_pg, is_schema_gone};

/// The kind of a session-mode lock's row in `recipes.names`.
pub(crate) const ADVISORY: &str = "advisory";
/// The kind of a session-mode semaphore's permits' row.
pub(crate) const ADVISORY_PERMITS: &str = "advisory-permits";
/// The kind of a session-mode read-write lock's row.
pub(crate) const ADVISORY_RW: &str = "advisory-rw";

/// The longest one wait at the server, whatever the TTL.
const MAX_SLICE: Duration = Duration::from_secs(1);

/// The longest one wait of a read-write lock at the server: its place in
/// the server's queue is what makes it fair, so it waits in one statement
/// until its deadline, or in slices this long without one.
const READ_WRITE_SLICE: Duration = Duration::from_secs(3600);

/// One acquisition's driver: the keys of `name`.
pub(crate) struct AdvisorySlots<'a> {
    pub(crate) client: &'a PgClient,
    /// The name whose row holds the fence: a lock's, a semaphore's permits'.
    pub(crate) name: &'a str,
    pub(crate) kind: &'static str,
    pub(crate) slots: usize,
    /// A read-write lock's reader: the key is taken shared.
    pub(crate) shared: bool,
}

/// The key name of slot `slot`: a lock's name itself, a permit's
/// `<permits' name>/<slot>`.
pub(crate) fn key_name(name: &str, slot: usize, kind: &str) -> String {
    if kind == ADVISORY_PERMITS {
        format!("{name}/{slot}")
    } else {
        name.to_owned()
    }
}

/// What a take asks first, as SQL over `$3` (the name) and `$4` (its
/// kind): that the name's row, if any, is of the kind, so that a name of
/// the other mode or another recipe is refused before its key is taken
/// (the fence's statement checks it again, atomically).
const KIND_FITS: &str =
    " WHERE NOT EXISTS (SELECT 1 FROM recipes.names WHERE name = $3 AND kind <> $4)";

/// Stamp our heartbeat on `key` (a session holder's, after waiting out
/// its previous holder).
async fn stamp(
    client: &PgClient,
    c: &tokio_postgres::Client,
    key: &str,
    ttl: Option<i64>,
) -> Result<()> {
    let what = format!("stamp the heartbeat of {key}");
    let sql = "INSERT INTO recipes.advisory (key, beat_at, ttl) \
               VALUES ($1, clock_timestamp(), $2 * interval '1 millisecond') \
               ON CONFLICT (key) DO UPDATE SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl";
    let params: crate::db::Params<'_> = &[(&key, Type::TEXT), (&ttl, Type::INT8)];
    recipes_core::store::within(&what, client.rpc_timeout(), async {
        c.query_typed(sql, params)
            .await
            .map_err(|e| from_pg(&what, e))
    })
    .await
    .map(drop)
}

/// The heartbeats of `t`'s connection held back ([`LockConn::stamping`]),
/// waited for an RPC timeout at most: a heartbeat that holds them back in
/// turn may not be answered (its connection cut off), and the
/// acquisition, which holds nothing it could lose yet, then starts over.
async fn hold_heartbeats(t: &Ticket) -> Result<tokio::sync::OwnedMutexGuard<()>> {
    let what = "hold the lock connection's heartbeats back";
    recipes_core::store::within(what, t.rpc_timeout, async { Ok(t.conn.stamping().await) }).await
}

/// An acquisition's lock session, ended on drop unless it won.
pub(crate) struct Epoch {
    session: Option<Arc<LockSession>>,
    conns: LockConns,
    client: PgClient,
}

impl Drop for Epoch {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            self.client
                .runtime()
                .spawn(async move { s.end(LossReason::Released).await });
        }
    }
}

/// One slot under one lock connection.
#[derive(Debug)]
pub(crate) struct Ticket {
    conn: Arc<LockConn>,
    namespace: i32,
    key_name: String,
    /// Our heartbeat row: the key's name, or a reader's own.
    beat_row: String,
    /// The key as `pg_locks.objid` shows it, once taken.
    key: Option<i64>,
    /// What a try minted in its statement (`mint::take_and_mint`).
    minted: Option<Minted>,
    /// The heartbeats held back from before a statement that stamped our
    /// key until confirm registers it ([`LockConn::stamping`]).
    stamping: Option<tokio::sync::OwnedMutexGuard<()>>,
    rpc_timeout: Duration,
}

/// A read-write lock reader's heartbeat row of the key `key_name` on the
/// lock connection `conn`: after the key's name, a unit separator
/// (U+001F), which no name holds, so it never is another recipe's key;
/// then the backend's PID and start (µs), so a later backend given the
/// same PID — a dead reader's — stamps a row of its own and never
/// overwrites or clears the dead reader's, which a writer must wait out.
pub(crate) fn reader_row(key_name: &str, conn: &LockConn) -> String {
    format!("{key_name}\u{1f}reader-{}-{}", conn.pid, conn.started)
}

/// A won slot: what the held lock is made of.
#[derive(Debug)]
pub(crate) struct Won {
    pub(crate) session: Arc<LockSession>,
    pub(crate) conn: Arc<LockConn>,
    pub(crate) key_name: String,
    pub(crate) beat_row: String,
    pub(crate) key: i64,
    pub(crate) fence: i64,
    /// A read-write lock's reader.
    pub(crate) shared: bool,
    /// A read-write lock's writer.
    pub(crate) writer: bool,
}

impl AdvisorySlots<'_> {
    /// Our heartbeat's TTL in ms, as the heartbeat rows keep it.
    fn beat_ttl(&self) -> Option<i64> {
        i64::try_from(self.client.leases().settings().ttl.as_millis()).ok()
    }

    /// The suffix of the advisory functions for our side: `_shared` for a
    /// read-write lock's reader.
    fn mode(&self) -> &'static str {
        if self.shared {
            "_shared"
        } else {
            ""
        }
    }
}

impl SlotDriver for AdvisorySlots<'_> {
    type Epoch = Epoch;
    type Ticket = Ticket;
    type Won = Won;

    fn slots(&self) -> usize {
        self.slots
    }

    /// A quarter of the TTL (a heartbeat queued behind a wait is answered
    /// within it), at most a second and half an RPC timeout. A read-write
    /// lock's waits are not sliced (an hour at most): a wait cut short
    /// leaves the server's queue, and the readers queued behind a waiting
    /// writer would be granted at that moment, passing it; heartbeats go
    /// over the statement connection meanwhile (`advisory.rs`).
    fn slice(&self) -> Duration {
        if self.kind == ADVISORY_RW {
            return READ_WRITE_SLICE;
        }
        let s = self.client.leases().settings();
        (s.ttl / 4).min(s.rpc_timeout / 2).min(MAX_SLICE)
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if !self.client.runtime().spawn(task) {
            log::debug!(
                "[{}] client closed: closing the lock connection frees it",
                self.name
            );
        }
    }

    fn rpc_timeout(&self) -> Duration {
        self.client.rpc_timeout()
    }

    async fn epoch(&self, _deadline: Option<Instant>) -> Result<Option<Epoch>> {
        let conns = self.client.lock_conns();
        let (settings, rt) = (self.client.leases().settings(), self.client.runtime());
        let session = LockSession::grant(conns.clone(), settings, rt, true).await?;
        self.client.register(&session);
        Ok(Some(Epoch {
            session: Some(session),
            conns,
            client: self.client.clone(),
        }))
    }

    fn epoch_signal(&self, epoch: &Epoch) -> LossSignal {
        match &epoch.session {
            Some(s) => s.epoch().signal(),
            None => recipes_core::store::LossTrigger::root().signal(),
        }
    }

    fn ticket(&self, epoch: &Epoch, slot: usize) -> Ticket {
        let conn = epoch
            .conns
            .conn()
            .expect("a granted lock session has a connection");
        let key_name = key_name(self.name, slot, self.kind);
        Ticket {
            beat_row: match self.shared {
                true => reader_row(&key_name, &conn),
                false => key_name.clone(),
            },
            conn,
            namespace: self.client.namespace() as i32,
            key_name,
            key: None,
            minted: None,
            stamping: None,
            rpc_timeout: self.client.rpc_timeout(),
        }
    }

    async fn take(&self, _epoch: &Epoch, t: &mut Ticket, within: Duration) -> Result<bool> {
        let what = format!("take the advisory lock of {}", t.key_name);
        let (c, on) = (&t.conn.client, t.conn.on());
        // Zero would wait forever: a wait's bound, for its `$6`.
        let bound = (!within.is_zero()).then(|| format!("{}ms", within.as_millis().max(1)));
        let all: [(&(dyn ToSql + Sync), Type); 6] = [
            (&t.namespace, Type::INT4),
            (&t.key_name, Type::TEXT),
            (&self.name, Type::TEXT),
            (&self.kind, Type::TEXT),
            (&t.conn.pid, Type::INT4),
            (&bound, Type::TEXT),
        ];
        // Each take runs on the backend the connection opened on, or
        // takes nothing (NULL): a pooler that moved the statement to
        // another backend would leave the lock there (`pooler.rs`).
        let moved = || crate::pooler::pooled(&self.client.db().shown);
        if within.is_zero() && self.kind != ADVISORY_RW {
            // A mutex's or a permit's try: taken and minted in one
            // statement (a read-write lock's mint is its own).
            let ttl = self.beat_ttl();
            let (ns, pid) = (t.namespace, t.conn.pid);
            let (name, kind, key) = (self.name, self.kind, &t.key_name);
            let stamping = hold_heartbeats(t).await?;
            let tried = take_and_mint(self.client, on, ns, name, kind, key, pid, ttl).await?;
            return Ok(match tried {
                Tried::Busy => false,
                Tried::Took { key, minted } => {
                    t.key = Some(key);
                    t.minted = Some(minted);
                    t.stamping = Some(stamping);
                    true
                }
            });
        }
        let taken = if within.is_zero() {
            let sql = format!(
                "SELECT CASE WHEN pg_backend_pid() = $5 \
                 THEN pg_try_advisory_lock{}($1, hashtext($2)) END, hashtext($2){KIND_FITS}",
                self.mode()
            );
            let rows = recipes_core::store::within(&what, t.rpc_timeout, async {
                on.query(&sql, &all[..5])
                    .await
                    .map_err(|e| from_pg(&what, e))
            })
            .await;
            let rows = match rows {
                Ok(rows) => rows,
                // Made again before the acquisition starts over.
                Err(e) if is_schema_gone(&e) => return Err(self.client.db().schema_gone(e).await),
                Err(e) => return Err(e),
            };
            let Some(row) = rows.first() else {
                return Err(refusal(self.client, self.name, self.kind, &what).await);
            };
            let Some(got) = row.get::<_, Option<bool>>(0) else {
                return Err(moved());
            };
            got.then(|| row.get::<_, i32>(1))
        } else {
            // The bound is the statement's own (`set_config(…, true)`
            // lasts to the end of its transaction, the statement): left
            // on the connection it would bound every later row lock
            // wait there too, a mint's included, and a reused
            // connection's. Evaluated before the wait, left to right.
            let sql = format!(
                "SELECT hashtext($2), set_config('lock_timeout', $6, true), \
                 CASE WHEN pg_backend_pid() = $5 \
                 THEN pg_advisory_lock{}($1, hashtext($2))::text END{KIND_FITS}",
                self.mode()
            );
            let long = match self.kind == ADVISORY_RW {
                true => Some(t.conn.long_wait(self.client).await),
                false => None,
            };
            let waited = recipes_core::store::within(&what, t.rpc_timeout + within, async {
                Ok(c.query_typed(&sql, &all).await)
            })
            .await;
            if let (Some(long), Ok(_)) = (long, &waited) {
                long.ended();
            }
            match waited {
                Ok(Ok(rows)) => match rows.first() {
                    Some(row) if row.get::<_, Option<&str>>(2).is_none() => return Err(moved()),
                    Some(row) => Some(row.get::<_, i32>(0)),
                    None => return Err(refusal(self.client, self.name, self.kind, &what).await),
                },
                Ok(Err(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => None,
                Ok(Err(e)) => match from_pg(&what, e) {
                    // Made again before the acquisition starts over.
                    e if is_schema_gone(&e) => return Err(self.client.db().schema_gone(e).await),
                    e => return Err(e),
                },
                Err(e) => return Err(e),
            }
        };
        Ok(match taken {
            Some(hash) => {
                let key = i64::from(hash as u32);
                t.key = Some(key);
                true
            }
            None => false,
        })
    }

    /// The fence, once the key's previous holder — if it ended without
    /// releasing (terminated, crashed, cut off) — is past its own deadline,
    /// so its loss has fired before ours begins. The heartbeats of our
    /// connection run meanwhile.
    async fn confirm(&self, _epoch: &Epoch, t: &mut Ticket) -> Result<Option<i64>> {
        let ttl = self.beat_ttl();
        let c = t.conn.on();
        let beat = Beat {
            row: &t.beat_row,
            reader: self.shared,
        };
        // The fence, and the wait before our heartbeat is stamped (none:
        // stamped already). The heartbeats are held back while a stamp of
        // ours is not yet theirs to renew (`LockConn::stamping`).
        let (fence, wait) = match t.minted.take() {
            Some(Minted {
                fence,
                stamped: true,
            }) => (fence, None),
            // A try's stamp was left out: the key's row said a previous
            // holder may still believe it holds; how long is read afresh.
            Some(Minted { fence, .. }) => {
                t.stamping = None;
                (fence, Some(remaining(self.client, c, &t.beat_row).await?))
            }
            None => {
                let (name, kind) = (self.name, self.kind);
                t.stamping = Some(hold_heartbeats(t).await?);
                let (fence, left) =
                    mint_fence(self.client, c, name, kind, &t.key_name, beat, ttl).await?;
                (fence, (!left.is_zero()).then_some(left))
            }
        };
        if let Some(left) = wait {
            // Not stamped: nothing to hold the heartbeats back for while
            // the previous holder's deadline is waited out.
            t.stamping = None;
            tokio::time::sleep(left).await;
            t.stamping = Some(hold_heartbeats(t).await?);
            stamp(self.client, c.client, &t.beat_row, ttl).await?;
        }
        // From now on the heartbeats check and stamp the key.
        if let Some(key) = t.key {
            t.conn.took(key, &t.beat_row);
        }
        t.stamping = None;
        // The heartbeats check the name's row as our fenced writes do
        // (`advisory_lock.rs`): a lock's fence stays the name's while it
        // holds; a reader's token is not the name's fence, but no writer's
        // is above it; a permit's row is there.
        let row = match (self.kind, self.shared) {
            (ADVISORY_PERMITS, _) => Fence::Any,
            (_, true) => Fence::AtMost(fence),
            (_, false) => Fence::At(fence),
        };
        t.conn.fenced(self.name, row);
        Ok(Some(fence))
    }

    /// Nothing to send: every way out but a win ends the epoch, whose
    /// `pg_advisory_unlock_all()` goes out on the same connection after
    /// whatever the take sent, so it undoes a take granted late too; only
    /// then is the connection kept for another acquisition.
    fn give_back(t: Ticket) -> impl std::future::Future<Output = ()> + Send + 'static {
        drop(t);
        std::future::ready(())
    }

    fn won(&self, mut epoch: Epoch, t: Ticket, fence: i64) -> Won {
        let session = epoch.session.take().expect("the epoch is won once");
        Won {
            session,
            conn: t.conn,
            key_name: t.key_name,
            beat_row: t.beat_row,
            key: t.key.unwrap_or_default(),
            fence,
            shared: self.shared,
            writer: self.kind == ADVISORY_RW && !self.shared,
        }
    }
}
