//! A client's session: one row of `recipes.sessions`, its expiry in
//! database time (`clock_timestamp()`), renewed by a guarded update that
//! never revives an expired row (0 rows: the lease is gone), revoked by a
//! delete whose cascade removes every entry of the session at once.
//!
//! [`PgLeases`] is the store's side (grant, renewals, revoke); the renewal
//! cadence and the local deadline are core's ([`renew_on`],
//! [`SessionLease`]).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use recipes_core::{
    renew_on, Backoff, Error, LossReason, NamedTurns, PooledSession, Renewal, RenewalStream,
    Result, Runtime, SessionLease, Settings, StopFlag, StreamEnd,
};
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;

use crate::db::Db;
use crate::sql::unexpected;

/// How often anyone's grant also deletes sessions expired this long ago
/// (their entries go with them); entries of an expired session never count
/// as contenders anyway.
const SWEEP_AFTER: &str = "1 minute";

/// The shortest renewal interval, whatever the TTL.
const MIN_RENEWAL_INTERVAL: Duration = Duration::from_millis(100);

/// The store's side of a session: rows of `recipes.sessions`.
#[derive(Clone)]
pub(crate) struct PgLeases {
    pub(crate) db: Arc<Db>,
}

impl PgLeases {
    pub(crate) fn label(&self, id: i64) -> String {
        format!("session={id}")
    }

    /// Insert a session row expiring `ttl` from now in database time: its
    /// id and the TTL granted (what was asked, to the millisecond).
    pub(crate) async fn grant(&self, ttl: Duration) -> Result<(i64, Duration)> {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let sql = "INSERT INTO recipes.sessions (ttl, expires_at) \
                   VALUES ($1 * interval '1 millisecond', \
                           clock_timestamp() + $1 * interval '1 millisecond') \
                   RETURNING id";
        let row = self
            .db
            .query_opt("open a session", sql, &[(&ms, Type::INT8)])
            .await?
            .ok_or_else(|| unexpected("an insert returned no row"))?;
        let sweep = format!(
            "DELETE FROM recipes.sessions WHERE expires_at < clock_timestamp() - interval '{SWEEP_AFTER}'"
        );
        let db = self.db.clone();
        tokio::spawn(async move {
            if let Err(e) = db.query("sweep expired sessions", &sweep, &[]).await {
                log::debug!("sweeping expired sessions failed: {e}");
            }
        });
        Ok((row.get(0), Duration::from_millis(ms.unsigned_abs())))
    }

    /// A renewal stream of session `id`.
    pub(crate) fn renewals(&self, id: i64) -> PgRenewals {
        PgRenewals {
            db: self.db.clone(),
            id,
            sent: VecDeque::new(),
        }
    }

    /// Delete the session row; its entries go with it. Gone already is done.
    pub(crate) async fn revoke(&self, id: i64) -> Result<()> {
        let sql = "DELETE FROM recipes.sessions WHERE id = $1";
        self.db
            .query("end a session", sql, &[(&id, Type::INT8)])
            .await
            .map(drop)
    }
}

/// Renewals of one session on the client's connection: each one an update
/// of its own, answered in the order sent (one connection runs them in
/// order).
pub(crate) struct PgRenewals {
    db: Arc<Db>,
    id: i64,
    sent: VecDeque<JoinHandle<Result<Renewal>>>,
}

impl RenewalStream for PgRenewals {
    async fn send(&mut self) -> Result<()> {
        let (db, id) = (self.db.clone(), self.id);
        self.sent.push_back(tokio::spawn(async move {
            let sql = "UPDATE recipes.sessions SET expires_at = clock_timestamp() + ttl \
                       WHERE id = $1 AND expires_at > clock_timestamp() \
                       RETURNING (extract(epoch FROM ttl) * 1000)::int8";
            let row = db
                .query_opt("renew the session", sql, &[(&id, Type::INT8)])
                .await?;
            Ok(match row {
                Some(row) => {
                    Renewal::Granted(Duration::from_millis(row.get::<_, i64>(0).unsigned_abs()))
                }
                None => Renewal::Gone,
            })
        }));
        Ok(())
    }

    async fn reply(&mut self) -> Result<Renewal> {
        let Some(oldest) = self.sent.front_mut() else {
            return std::future::pending().await;
        };
        let answered = oldest.await;
        self.sent.pop_front();
        answered.map_err(|_| Error::ConnectionLoss)?
    }
}

/// One session: its row, its epoch, and the renewals that keep it.
pub(crate) struct Session {
    pub(crate) store: PgLeases,
    pub(crate) id: i64,
    pub(crate) ttl: Duration,
    pub(crate) label: String,
    pub(crate) epoch: SessionLease,
    stop: StopFlag,
    // Entries are named by a fresh uuid each: acquisitions of one name may
    // share a session, so no turn is ever taken here.
    turns: NamedTurns,
}

impl Session {
    /// Open a session and start renewing it on `rt`. Runs on the runtime.
    pub(crate) async fn open(
        store: PgLeases,
        settings: &Settings,
        rt: &Runtime,
    ) -> Result<Arc<Session>> {
        let clock = recipes_core::system_clock();
        let sent_at = clock.now();
        let (id, ttl) = store.grant(settings.ttl).await?;
        let label = store.label(id);
        let epoch = SessionLease::start(&label, rt.loss_root(), clock, settings.lease_slack)?;
        epoch.acknowledged(sent_at, ttl);
        let session = Arc::new(Session {
            store,
            id,
            ttl,
            label,
            epoch,
            stop: StopFlag::default(),
            turns: NamedTurns::default(),
        });
        rt.handle()
            .spawn(keep(session.clone(), settings.rpc_timeout));
        log::debug!("[{}] session opened, TTL {ttl:?}", session.label);
        Ok(session)
    }

    /// Whether new acquisitions may use it.
    pub(crate) fn is_usable(&self) -> bool {
        !self.stop.is_stopped() && !self.epoch.is_lost()
    }

    /// Whether renewals were stopped (orphaned or revoked).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.is_stopped()
    }

    /// Stop renewing without deleting the row: it expires after its TTL.
    pub(crate) fn orphan(&self) {
        if self.stop.stop() {
            log::debug!("[{}] orphaned: renewals stop", self.label);
        }
    }

    /// Stop renewing and delete the row (every entry goes with it); guards
    /// on it are lost first, with `reason`.
    pub(crate) async fn revoke(&self, reason: LossReason) -> Result<()> {
        self.epoch.fire(reason);
        self.orphan();
        self.store.revoke(self.id).await
    }
}

/// Renew `s` every TTL/3 until it is stopped or lost; a broken stream is
/// opened again after a pause. A session lost by its deadline is deleted,
/// so that its entries stop blocking others at once.
async fn keep(s: Arc<Session>, rpc_timeout: Duration) {
    let interval = (s.ttl / 3).max(MIN_RENEWAL_INTERVAL);
    let mut backoff = Backoff::new(
        Duration::from_millis(20),
        (s.ttl / 6).max(MIN_RENEWAL_INTERVAL),
    );
    loop {
        let mut stream = s.store.renewals(s.id);
        let end = renew_on(
            &s.epoch,
            &s.label,
            &mut stream,
            interval,
            rpc_timeout,
            &s.stop,
        );
        match end.await {
            StreamEnd::Broken => tokio::select! {
                () = backoff.pause() => {}
                () = s.stop.stopped() => return,
            },
            StreamEnd::Over => break,
        }
    }
    if !s.stop.is_stopped() && s.epoch.is_lost() {
        log::info!("[{}] session lost; deleting its row", s.label);
        if let Err(e) = s.revoke(LossReason::DeadlineExpired).await {
            log::debug!("[{}] delete failed: {e}; the row expires", s.label);
        }
    }
}

impl PooledSession for Session {
    fn is_usable(&self) -> bool {
        Session::is_usable(self)
    }

    fn turns(&self) -> &NamedTurns {
        &self.turns
    }

    async fn discard(self: Arc<Self>) {
        let _ = self.revoke(LossReason::Closed).await;
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("valid_until", &self.epoch.valid_until())
            .finish()
    }
}
