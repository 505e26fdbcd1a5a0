//! The client's two shared connections (see [`Lane`]): each made on first
//! use and again once broken, each statement timed on its own and sent
//! unnamed (`query_typed`: parse, bind and execute in one round trip), so
//! a transaction-mode pooler can run it on any backend.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::store::within;
use recipes_core::tls::{Probe, TlsProblem};
use recipes_core::{Error, Result};
use tokio::sync::watch;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::sql::{from_pg, is_schema_gone};

/// A statement's parameters with their types.
pub(crate) type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// A row the client's poll watches ([`Db::rows_present`]): a held lock's
/// or a group member's entry, the session it must still be of (a member's
/// entry, named by its id, is taken by another session's join once ours
/// went), and the fence its name's row must still have (`None`: any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct HeldRow {
    pub(crate) entry: uuid::Uuid,
    pub(crate) session: i64,
    pub(crate) fence: Option<i64>,
}

/// Which of the client's two shared (pipelined) connections a statement
/// goes on. A connection answers in the order sent, so a statement that
/// waits at the server holds up every one sent after it on the same
/// connection until it ends or the RPC timeout breaks the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Enters, looks, releases, fenced checks, a session's revoke and the
    /// sweep of expired ones: statements that may wait at the server for
    /// a row lock another transaction holds (a fenced transaction holds
    /// its name's row in share mode to its commit).
    Statements,
    /// What keeps the session alive or decides its loss — its grant, its
    /// renewals, the poll of the rows the client holds: a statement
    /// waiting on the other lane cannot make them late (a late renewal
    /// loses every lock of the client at the local deadline). None takes
    /// a name's row; a renewal waits only for a confirm that holds the
    /// session's row in share mode (`contend.sql`) to commit.
    Leases,
}

/// How to reach the database, and the connections in use.
pub(crate) struct Db {
    config: Config,
    /// The TLS connector, when the client uses TLS.
    tls: Option<MakeRustlsConnect>,
    /// What explains a failed connect (see [`Probe`]).
    probe: Probe,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
    rpc_timeout: Duration,
    connect_timeout: Duration,
    /// The connection in use of each [`Lane`] (indexed by it).
    current: [tokio::sync::Mutex<Option<Arc<Client>>>; 2],
    /// Connections of finished fenced transactions, for the next one.
    idle: parking_lot::Mutex<Vec<Client>>,
    /// Held while the schema is made sure of again (see
    /// [`schema_gone`](Db::schema_gone)), so the client's statements that
    /// all found it gone create it once.
    recreating: tokio::sync::Mutex<()>,
    /// Called when a lane's connection in use ends (see
    /// [`on_disconnect`](Db::on_disconnect)).
    disconnected: Arc<parking_lot::Mutex<Option<Disconnected>>>,
}

/// What runs when a lane's connection drops.
type Disconnected = Box<dyn Fn() + Send + Sync>;

/// How many idle transaction connections a client keeps.
const IDLE_CONNECTIONS: usize = 4;

impl Db {
    pub(crate) fn new(
        (config, probe): (Config, Probe),
        shown: String,
        rpc_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Db> {
        let tls = match &probe.files {
            None => None,
            Some(files) => Some(MakeRustlsConnect::new(
                (*files.client_config(probe.verify)?).clone(),
            )),
        };
        Ok(Db {
            config,
            tls,
            probe,
            shown,
            rpc_timeout,
            connect_timeout,
            current: Default::default(),
            idle: parking_lot::Mutex::new(Vec::new()),
            recreating: tokio::sync::Mutex::new(()),
            disconnected: Arc::default(),
        })
    }

    /// A new connection, its driving task spawned on the runtime; `drive`
    /// sees every message the server sends on its own (notifications).
    pub(crate) async fn open(
        &self,
        drive: impl FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
    ) -> Result<Client> {
        self.connect(drive, None).await
    }

    /// A new connection and a flag that turns `true` the moment its driving
    /// task ends (the server closed it, terminated its backend, or it
    /// broke): what a session-mode lock connection's holdings watch.
    pub(crate) async fn open_watched(&self) -> Result<(Client, watch::Receiver<bool>)> {
        let (ended, rx) = watch::channel(false);
        let client = self.connect(|_| {}, Some(ended)).await?;
        Ok((client, rx))
    }

    /// Connect (over TLS when the client uses it) and spawn the driving
    /// task, which sets `ended` when it ends.
    async fn connect(
        &self,
        drive: impl FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
        ended: Option<watch::Sender<bool>>,
    ) -> Result<Client> {
        let what = format!("connect to PostgreSQL at {}", self.shown);
        let failed = |e| self.failed(&what, e);
        let shown = self.shown.clone();
        let done = move || {
            if let Some(ended) = ended {
                let _ = ended.send(true);
            }
        };
        let connecting = async {
            let client = match &self.tls {
                None => {
                    let (client, connection) = self.config.connect(NoTls).await.map_err(failed)?;
                    tokio::spawn(async move {
                        drive_connection(connection, drive, shown).await;
                        done();
                    });
                    client
                }
                Some(tls) => {
                    let (client, connection) =
                        self.config.connect(tls.clone()).await.map_err(failed)?;
                    tokio::spawn(async move {
                        drive_connection(connection, drive, shown).await;
                        done();
                    });
                    client
                }
            };
            Ok(client)
        };
        self.probe
            .connect(&what, self.connect_timeout, connecting)
            .await
    }

    /// A failed connect's error: in TLS terms when TLS is why (the
    /// server's refusals of a plain or certificate-less login included).
    fn failed(&self, what: &str, e: tokio_postgres::Error) -> Error {
        if let Some(found) = self.probe.error_in(&e) {
            return found;
        }
        let said = match e.as_db_error() {
            Some(db) => db.message().to_owned(),
            // "error performing TLS handshake" names the reason in its source.
            None => std::error::Error::source(&e).map_or(e.to_string(), |c| c.to_string()),
        };
        if said.contains("password missing") {
            return crate::sql::refused_credentials(
                what,
                "the server asks for a password and the URL gives none",
            );
        }
        let problem = match () {
            _ if said.contains("server does not support TLS") => TlsProblem::TlsClientPlainServer,
            _ if said.contains("no encryption") => TlsProblem::PlainClientTlsServer,
            _ if said.contains("requires a valid client certificate") => {
                TlsProblem::ClientCertRequired
            }
            _ if said.contains("certificate authentication failed") => {
                TlsProblem::ClientCertRejected
            }
            _ => return from_pg(what, e),
        };
        problem.error(&self.probe.target, &said)
    }

    /// No server answered: a retryable error naming the URL.
    pub(crate) fn unreachable(&self) -> Error {
        let (who, check) = &self.probe.unanswered;
        recipes_core::store::no_server_answered(who, self.connect_timeout, check)
    }

    /// Run `f` whenever either lane's connection in use drops (the loss
    /// policy `OnDisconnect`).
    pub(crate) fn on_disconnect(&self, f: Disconnected) {
        *self.disconnected.lock() = Some(f);
    }

    /// The statement connection in use, or a new one when it is broken.
    pub(crate) async fn conn(&self) -> Result<Arc<Client>> {
        self.conn_of(Lane::Statements).await
    }

    /// `lane`'s connection in use, or a new one when it is broken.
    async fn conn_of(&self, lane: Lane) -> Result<Arc<Client>> {
        let mut current = self.current[lane as usize].lock().await;
        if let Some(c) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let (ended, mut rx) = watch::channel(false);
        let c = Arc::new(self.connect(|_| {}, Some(ended)).await?);
        let disconnected = self.disconnected.clone();
        tokio::spawn(async move {
            if rx.wait_for(|ended| *ended).await.is_ok() {
                if let Some(f) = &*disconnected.lock() {
                    f();
                }
            }
        });
        *current = Some(c.clone());
        Ok(c)
    }

    /// Forget `c` if it is still the connection in use: its reply did not
    /// come, so what is queued behind it on the wire may never come either.
    async fn broken(&self, lane: Lane, c: &Arc<Client>) {
        let mut current = self.current[lane as usize].lock().await;
        if current.as_ref().is_some_and(|k| Arc::ptr_eq(k, c)) {
            *current = None;
        }
    }

    /// Run one statement on the statement connection ([`Lane::Statements`]);
    /// see [`query_on`](Db::query_on).
    pub(crate) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        self.query_on(Lane::Statements, what, sql, params).await
    }

    /// Run one statement on `lane`'s connection within the RPC timeout; a
    /// timeout or a broken
    /// connection drops the connection, so the next statement opens
    /// another. A statement that finds the schema gone creates it again
    /// ([`schema_gone`](Db::schema_gone)) and runs once more, on the new
    /// schema: a renewal then finds no row (the lease is gone), a look at
    /// a held row none (the row is gone).
    pub(crate) async fn query_on(
        &self,
        lane: Lane,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        match self.query_once(lane, what, sql, params).await {
            Err(e) if is_schema_gone(&e) => {
                let e = self.schema_gone(e).await;
                if !(e.is_retryable() && is_schema_gone(&e)) {
                    return Err(e);
                }
                self.query_once(lane, what, sql, params).await
            }
            sent => sent,
        }
    }

    async fn query_once(
        &self,
        lane: Lane,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        let c = self.conn_of(lane).await?;
        let sent = within(what, self.rpc_timeout, async {
            c.query_typed(sql, params)
                .await
                .map_err(|e| from_pg(what, e))
        })
        .await;
        if let Err(Error::Timeout { .. } | Error::ConnectionLoss) = &sent {
            self.broken(lane, &c).await;
        }
        sent
    }

    /// A statement found the schema `recipes` or a table of it missing
    /// (`e`): create it again before anything else uses it (a warning says
    /// so), and make `e` retryable, so the caller's next try runs on the
    /// new schema. Whatever lived in the old one is lost: a renewal or a
    /// presence poll that sees `e` (still [`is_schema_gone`]) reports its
    /// lease or row gone. Fences minted in the new schema follow the
    /// database clock, above every earlier one. When the schema cannot be
    /// made again (no privilege, a schema that lacks some of its tables),
    /// `e` says why and is not retried.
    pub(crate) async fn schema_gone(&self, e: Error) -> Error {
        let _one = self.recreating.lock().await;
        let made = async {
            // A connection of its own: the statement connection is shared
            // (pipelined) by the client's tasks, and one of their statements
            // sent between the creation's statements would run inside its
            // transaction, on the half-made layout (seen: an insert that
            // found the queue without its newest column).
            let c = self.open(|_| {}).await?;
            let what = "create the schema recipes again";
            within(
                what,
                self.rpc_timeout.saturating_mul(3),
                crate::schema::recreate(&c, &self.shown),
            )
            .await
        };
        let Error::Backend {
            message, source, ..
        } = e
        else {
            return e;
        };
        match made.await {
            Ok(()) => Error::Backend {
                message: format!("{message}; created it again: try again"),
                retryable: true,
                source,
            },
            // Tried again by the next statement that finds it gone.
            Err(failed) if failed.is_retryable() => failed,
            Err(failed) => {
                log::warn!(
                    "[pg={}] {message}; creating it again failed: {failed}",
                    self.shown
                );
                Error::Backend {
                    message: format!("{message}; creating it again failed: {failed}"),
                    retryable: false,
                    source,
                }
            }
        }
    }

    /// [`query_on`](Db::query_on) for at most one row.
    pub(crate) async fn query_opt_on(
        &self,
        lane: Lane,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>> {
        Ok(self
            .query_on(lane, what, sql, params)
            .await?
            .into_iter()
            .next())
    }

    /// [`query`](Db::query) for at most one row.
    pub(crate) async fn query_opt(
        &self,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>> {
        self.query_opt_on(Lane::Statements, what, sql, params).await
    }

    /// Which of the queue `entries` still have their rows, of the session
    /// given beside each, and the name's fence given (unless `None`), in
    /// order: one statement, on [`Lane::Leases`] (a plain read waits for no
    /// lock, and a row found gone is a loss). None has when the schema is
    /// gone.
    pub(crate) async fn rows_present(&self, entries: Vec<HeldRow>) -> Result<Vec<bool>> {
        let sql = "SELECT e.entry FROM unnest($1::uuid[], $2::int8[], $3::int8[]) \
                     AS e (entry, session, fence) \
                   JOIN recipes.queue q ON q.entry = e.entry AND q.session = e.session \
                   WHERE e.fence IS NULL OR EXISTS (SELECT 1 FROM recipes.names n \
                                                    WHERE n.name = q.name AND n.fence = e.fence)";
        let what = format!("look at {} held rows", entries.len());
        let ids: Vec<uuid::Uuid> = entries.iter().map(|r| r.entry).collect();
        let sessions: Vec<i64> = entries.iter().map(|r| r.session).collect();
        let fences: Vec<Option<i64>> = entries.iter().map(|r| r.fence).collect();
        let params: Params<'_> = &[
            (&ids, Type::UUID_ARRAY),
            (&sessions, Type::INT8_ARRAY),
            (&fences, Type::INT8_ARRAY),
        ];
        let rows = match self.query_on(Lane::Leases, &what, sql, params).await {
            Ok(rows) => rows,
            // The schema was dropped: every row with it.
            Err(e) if is_schema_gone(&e) => return Ok(vec![false; entries.len()]),
            Err(e) => return Err(e),
        };
        let there: std::collections::HashSet<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
        Ok(entries.iter().map(|r| there.contains(&r.entry)).collect())
    }

    /// The deadline of one statement.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.rpc_timeout
    }

    /// A connection of its own, for one explicit transaction: an idle one
    /// or a new one.
    pub(crate) async fn checkout(&self) -> Result<Client> {
        let idle = {
            let mut idle = self.idle.lock();
            idle.retain(|c| !c.is_closed());
            idle.pop()
        };
        match idle {
            Some(c) => Ok(c),
            None => self.open(|_| {}).await,
        }
    }

    /// Give back a connection whose transaction ended cleanly.
    pub(crate) fn checkin(&self, c: Client) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_CONNECTIONS && !c.is_closed() {
            idle.push(c);
        }
    }
}

/// Drive a connection (plain or TLS) until it ends, handing the server's
/// own messages to `drive`.
async fn drive_connection<T>(
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, T>,
    mut drive: impl FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
    shown: String,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let ended = std::future::poll_fn(|cx| loop {
        match connection.poll_message(cx) {
            std::task::Poll::Ready(Some(Ok(m))) => drive(m),
            std::task::Poll::Ready(Some(Err(e))) => return std::task::Poll::Ready(Some(e)),
            std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
            std::task::Poll::Pending => return std::task::Poll::Pending,
        }
    })
    .await;
    match ended {
        Some(e) => log::debug!("[pg={shown}] connection ended: {e}"),
        None => log::trace!("[pg={shown}] connection closed"),
    }
}
