//! The shared counter: a row of `recipes.names` of kind `counter`, its
//! value in the `fence` column and its version in `next_seq` (0 while the
//! row does not exist, 1 once written, one more for every write). A write
//! is an `UPDATE … WHERE next_seq = version`; no schema change. Another
//! recipe's row refuses the counter, and a counter's row refuses every
//! other recipe (their kinds differ). Every write notifies the name's
//! channel in its statement; a wait listens before it reads (and reads
//! again every poll interval, should the listener have missed it, as
//! barriers do).

use recipes_core::store::CounterBackend;
use recipes_core::{CounterKind, Error, Result, Versioned};
use tokio_postgres::types::Type;

use crate::barrier::{bounded, Changes, Epoch, PgWaits};
use crate::client::PgClient;
use crate::names::{other_layout, validate_name};

/// `write` (a statement returning the name of the row it wrote), then a
/// notification of the name's channel for each row written, in the same
/// statement: a waiter that listened before its read hears every write
/// after it. The write reads `b` ([`bounded`]) before it locks the row, so
/// a write given up while it waited for the row never lands later.
macro_rules! notified {
    ($write:literal) => {
        concat!(
            "WITH ",
            bounded!(4),
            ", w AS (",
            $write,
            ") SELECT pg_notify('recipes_' || md5(name), '0') FROM w"
        )
    };
}

/// The kind of a counter's row in `recipes.names`.
pub(crate) const COUNTER: &str = "counter";

/// A counter backend on PostgreSQL; see the module.
#[derive(Debug, Clone)]
pub struct PgCounter {
    client: PgClient,
    name: String,
    kind: CounterKind,
    waits: PgWaits,
}

impl PgCounter {
    pub(crate) fn new(client: &PgClient, name: &str, kind: CounterKind) -> Result<PgCounter> {
        validate_name("counter", name)?;
        Ok(PgCounter {
            waits: PgWaits {
                client: client.clone(),
                name: name.to_owned(),
                count: 0,
            },
            client: client.clone(),
            name: name.to_owned(),
            kind,
        })
    }

    async fn read(&self) -> Result<Versioned> {
        let sql = "SELECT kind, fence, next_seq FROM recipes.names WHERE name = $1";
        let what = format!("read the counter {}", self.name);
        let row = self
            .client
            .db()
            .query_opt(&what, sql, &[(&self.name, Type::TEXT)])
            .await?;
        let Some(row) = row else {
            return Ok(Versioned {
                value: 0,
                version: 0,
            });
        };
        let kind: String = row.get(0);
        if kind != COUNTER {
            return Err(other_layout(&self.name, COUNTER, &kind));
        }
        let value: i64 = row.get(1);
        if !self.kind.fits(value) {
            return Err(Error::invalid(format!(
                "the PostgreSQL counter {} holds {value}, which a {} counter cannot read: \
                 open it as a 64-bit counter (counter64)",
                recipes_core::store::quote(&self.name),
                self.kind.describe()
            )));
        }
        Ok(Versioned {
            value,
            version: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
        })
    }

    /// Run `sql` (parameters: name, value, version, the lock bound);
    /// whether it changed a row. When not, a read refuses another
    /// recipe's row.
    fn write(
        &self,
        what: &'static str,
        sql: &'static str,
        version: u64,
        value: i64,
    ) -> Result<bool> {
        let me = self.clone();
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        self.client.call(what, async move {
            let (shown, bound) = (format!("{what} {}", me.name), me.client.lock_wait_bound());
            let params: crate::db::Params<'_> = &[
                (&me.name, Type::TEXT),
                (&value, Type::INT8),
                (&version, Type::INT8),
                (&bound, Type::TEXT),
            ];
            let rows = me.client.db().query(&shown, sql, params).await?;
            if !rows.is_empty() {
                return Ok(true);
            }
            me.read().await.map(|_| false)
        })
    }
}

impl CounterBackend for PgCounter {
    type Waits = PgWaits;

    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> CounterKind {
        self.kind
    }

    fn get(&self) -> Result<Versioned> {
        let me = self.clone();
        self.client
            .call("read the counter", async move { me.read().await })
    }

    fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        let sql = if version == 0 {
            notified!(
                "INSERT INTO recipes.names (name, kind, next_seq, fence) \
                 SELECT $1, 'counter', 1, $2 FROM b WHERE $3::int8 = 0 \
                 ON CONFLICT (name) DO NOTHING RETURNING name"
            )
        } else {
            notified!(
                "UPDATE recipes.names r SET fence = $2, next_seq = r.next_seq + 1 FROM b \
                 WHERE r.name = $1 AND r.kind = 'counter' AND r.next_seq = $3 RETURNING r.name"
            )
        };
        self.write("write the counter", sql, version, value)
    }

    fn delete_if(&self, version: u64) -> Result<bool> {
        let sql = notified!(
            "DELETE FROM recipes.names r USING b \
             WHERE r.name = $1 AND r.kind = 'counter' AND r.next_seq = $3 RETURNING r.name"
        );
        self.write("delete the counter", sql, version, 0)
    }

    fn waits(&self) -> &PgWaits {
        &self.waits
    }

    async fn read_armed(&self, _epoch: &Epoch) -> Result<(Versioned, Changes)> {
        let heard = self.waits.ear().await;
        let now = self.read().await?;
        Ok((now, self.waits.changes(heard, None)))
    }
}
