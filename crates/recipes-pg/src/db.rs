//! The client's connection: made on first use and again once broken, each
//! statement timed on its own and sent unnamed (`query_typed`: parse, bind
//! and execute in one round trip), so a transaction-mode pooler can run it
//! on any backend.

use std::sync::Arc;
use std::time::Duration;

use recipes_core::{within, Error, Result};
use tokio::sync::watch;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row};

use crate::sql::from_pg;

/// A statement's parameters with their types.
pub(crate) type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// How to reach the database, and the connection in use.
pub(crate) struct Db {
    config: Config,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
    rpc_timeout: Duration,
    connect_timeout: Duration,
    current: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Connections of finished fenced transactions, for the next one.
    idle: parking_lot::Mutex<Vec<Client>>,
}

/// How many idle transaction connections a client keeps.
const IDLE_CONNECTIONS: usize = 4;

impl Db {
    pub(crate) fn new(
        config: Config,
        shown: String,
        rpc_timeout: Duration,
        connect_timeout: Duration,
    ) -> Db {
        Db {
            config,
            shown,
            rpc_timeout,
            connect_timeout,
            current: tokio::sync::Mutex::new(None),
            idle: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// A new connection, its driving task spawned on the runtime; `drive`
    /// sees every message the server sends on its own (notifications).
    pub(crate) async fn open(
        &self,
        drive: impl FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
    ) -> Result<Client> {
        let (client, connection) = self.connect().await?;
        tokio::spawn(drive_connection(connection, drive, self.shown.clone()));
        Ok(client)
    }

    /// A new connection and a flag that turns `true` the moment its driving
    /// task ends (the server closed it, terminated its backend, or it
    /// broke): what a session-mode lock connection's holdings watch.
    pub(crate) async fn open_watched(&self) -> Result<(Client, watch::Receiver<bool>)> {
        let (client, connection) = self.connect().await?;
        let (ended, rx) = watch::channel(false);
        let shown = self.shown.clone();
        tokio::spawn(async move {
            drive_connection(connection, |_| {}, shown).await;
            let _ = ended.send(true);
        });
        Ok((client, rx))
    }

    async fn connect(
        &self,
    ) -> Result<(
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    )> {
        let what = format!("connect to PostgreSQL at {}", self.shown);
        let connecting = async {
            self.config
                .connect(NoTls)
                .await
                .map_err(|e| from_pg(&what, e))
        };
        let (client, connection) = match within(&what, self.connect_timeout, connecting).await {
            Ok(c) => c,
            Err(Error::Timeout { .. } | Error::ConnectionLoss) => {
                return Err(self.unreachable());
            }
            Err(e) => return Err(e),
        };
        Ok((client, connection))
    }

    /// No server answered: a retryable error naming the URL.
    pub(crate) fn unreachable(&self) -> Error {
        recipes_core::no_server_answered(
            &format!("no PostgreSQL server at {}", self.shown),
            self.connect_timeout,
            "the host and port are PostgreSQL's (5432 by default, pgbouncer's 6432), not \
             another store's",
        )
    }

    /// The connection in use, or a new one when it is broken.
    pub(crate) async fn conn(&self) -> Result<Arc<Client>> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(self.open(|_| {}).await?);
        *current = Some(c.clone());
        Ok(c)
    }

    /// Forget `c` if it is still the connection in use: its reply did not
    /// come, so what is queued behind it on the wire may never come either.
    async fn broken(&self, c: &Arc<Client>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|k| Arc::ptr_eq(k, c)) {
            *current = None;
        }
    }

    /// Run one statement within the RPC timeout; a timeout or a broken
    /// connection drops the connection, so the next statement opens
    /// another.
    pub(crate) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>> {
        let c = self.conn().await?;
        let sent = within(what, self.rpc_timeout, async {
            c.query_typed(sql, params)
                .await
                .map_err(|e| from_pg(what, e))
        })
        .await;
        if let Err(Error::Timeout { .. } | Error::ConnectionLoss) = &sent {
            self.broken(&c).await;
        }
        sent
    }

    /// [`query`](Db::query) for at most one row.
    pub(crate) async fn query_opt(
        &self,
        what: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>> {
        Ok(self.query(what, sql, params).await?.into_iter().next())
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

/// Drive a connection until it ends, handing the server's own messages to
/// `drive`.
async fn drive_connection(
    mut connection: tokio_postgres::Connection<
        tokio_postgres::Socket,
        tokio_postgres::tls::NoTlsStream,
    >,
    mut drive: impl FnMut(tokio_postgres::AsyncMessage) + Send + 'static,
    shown: String,
) {
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
