//! Session mode's statements prepared once per lock connection
//! ([`On::query`]): a session-mode cycle's statements (the take, the mint,
//! the release's clear and unlock) were parsed and planned on every run,
//! most of its server time (measured: `docs/notes/pg-driver.md`).

use parking_lot::Mutex;
use tokio_postgres::types::Type;

/// Statements prepared on one connection, by their SQL.
#[derive(Default)]
pub(crate) struct Prepared(Mutex<std::collections::HashMap<String, tokio_postgres::Statement>>);

/// Where a session-mode statement runs: a connection, and its prepared
/// statements when it is a lock connection of its own.
#[derive(Clone, Copy)]
pub(crate) struct On<'a> {
    pub(crate) client: &'a tokio_postgres::Client,
    pub(crate) prepared: Option<&'a Prepared>,
}

impl<'a> On<'a> {
    /// A connection whose statements are not prepared (a transaction
    /// scope's, which may be a pooler's).
    pub(crate) fn plain(client: &'a tokio_postgres::Client) -> On<'a> {
        On {
            client,
            prepared: None,
        }
    }

    /// `sql` with `params`. On a lock connection, from its second run on,
    /// as a statement prepared on that connection (so the server parses
    /// and plans it once, not on every run: most of a session-mode
    /// cycle's server time was that, measured); the first run goes
    /// unnamed, as on any connection, and the statement is prepared after
    /// it. Either way the statement that runs is sent when the future is
    /// first polled, so statements sent one after another on a connection
    /// run in that order (the release's clear, then its unlock). A lock
    /// connection is a session of its own (session mode refuses a
    /// transaction pooler: `pooler.rs`), so its prepared statements stay.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: crate::db::Params<'_>,
    ) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let Some(prepared) = self.prepared else {
            return self.client.query_typed(sql, params).await;
        };
        let cached = prepared.0.lock().get(sql).cloned();
        if let Some(statement) = cached {
            let values: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.0).collect();
            return self.client.query(&statement, &values).await;
        }
        let rows = self.client.query_typed(sql, params).await?;
        let types: Vec<Type> = params.iter().map(|p| p.1.clone()).collect();
        if let Ok(statement) = self.client.prepare_typed(sql, &types).await {
            prepared.0.lock().insert(sql.to_owned(), statement);
        }
        Ok(rows)
    }
}
