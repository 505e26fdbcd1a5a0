//! A read of the server's settings, for a deployment check (`recipes
//! doctor`): on the client's own statement connection, with its role,
//! within the RPC timeout.

use recipes_core::Result;

use crate::client::PgClient;

impl PgClient {
    /// Run the read-only statement `sql` (no parameters) and return its
    /// rows with every column as text (`NULL` as `None`): cast each column
    /// to `text` in `sql`. For reading settings (`current_setting`,
    /// `pg_settings`, `pg_stat_replication`), not for the recipes' tables.
    ///
    /// # Errors
    ///
    /// The server's refusal (a missing privilege is
    /// [`recipes_core::Error::PermissionDenied`]); connection errors
    /// within the RPC timeout.
    pub fn server_rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let (client, sql) = (self.clone(), sql.to_owned());
        self.call("read server settings", async move {
            let rows = client.db().query("read server settings", &sql, &[]).await?;
            Ok(rows
                .iter()
                .map(|row| {
                    (0..row.len())
                        .map(|i| row.get::<_, Option<String>>(i))
                        .collect()
                })
                .collect())
        })
    }
}
