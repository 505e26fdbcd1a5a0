//! [`PgClient`] as the one client surface of `recipes-core`
//! ([`recipes_core::Client`]): recipes by name, contenders in queue order,
//! reads of `recipes.kv`.

use std::time::{Duration, Instant};

use recipes_core::store::engine::Role;
use recipes_core::{BootInstant, Client, Contender, Result};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::builder::PgMode;
use crate::client::PgClient;
use crate::contend::role_of;
use crate::names::{holder, validate_key, validate_name};
use crate::semaphore::permits_name;
use crate::slots::{key_name, ADVISORY, ADVISORY_PERMITS, ADVISORY_RW};

/// The live entries of the queue `name`, first in line first.
pub(crate) async fn read_contenders(client: &PgClient, name: &str) -> Result<Vec<Contender>> {
    let sql = "SELECT q.entry, q.seq, q.value, q.role FROM recipes.queue q \
               JOIN recipes.sessions s ON s.id = q.session \
               WHERE q.name = $1 AND s.expires_at > clock_timestamp() ORDER BY q.seq";
    let what = format!("list the contenders of {name}");
    let rows = client
        .db()
        .query(&what, sql, &[(&name, Type::TEXT)])
        .await?;
    Ok(rows
        .iter()
        .map(|r| Contender {
            holder: holder(name, &r.get::<_, Uuid>(0)),
            created: r.get(1),
            value: r.get(2),
            role: r
                .get::<_, Option<&str>>(3)
                .map(|role| role_of(Some(role), Role::Writer)),
        })
        .collect())
}

/// Session mode: the backends that hold (first) or wait for the advisory
/// keys `keys` (in the order they began to wait), as
/// `<key>/backend-<pid>`; `created` is the PID. A read-write lock's
/// (`rw`) show their role: a shared lock's backend reads.
pub(crate) async fn read_advisory_holders(
    client: &PgClient,
    keys: Vec<String>,
    rw: bool,
) -> Result<Vec<Contender>> {
    let sql =
        "SELECT k.key || '/backend-' || l.pid, l.pid, l.mode FROM unnest($1::text[]) AS k(key) \
               JOIN pg_locks l ON l.locktype = 'advisory' AND l.objsubid = 2 \
                 AND l.classid::int8 = $2 AND l.objid::int8 = hashtext(k.key)::int8 & 4294967295 \
               ORDER BY l.granted DESC, l.waitstart NULLS FIRST, l.pid";
    let ns = i64::from(client.namespace());
    let what = "list the holders of advisory locks";
    let params: crate::db::Params<'_> = &[(&keys, Type::TEXT_ARRAY), (&ns, Type::INT8)];
    let rows = client.db().query(what, sql, params).await?;
    Ok(rows
        .iter()
        .map(|r| Contender {
            holder: r.get(0),
            created: i64::from(r.get::<_, i32>(1)),
            value: Vec::new(),
            role: rw.then(|| match r.get::<_, &str>(2) {
                "ShareLock" => Role::Reader,
                _ => Role::Writer,
            }),
        })
        .collect())
}

/// Whether `name` is used in session mode: this client is in it, or the
/// name's row is of the session-mode `kind` (a lease-mode client, such as
/// `recipes status`, still shows a session-mode holder).
async fn used_in_session_mode(client: &PgClient, name: &str, kind: &str) -> Result<bool> {
    if client.mode() == PgMode::Session {
        return Ok(true);
    }
    Ok(kind_of(client, name).await?.as_deref() == Some(kind))
}

/// The kind of `name`'s row, if it has one.
async fn kind_of(client: &PgClient, name: &str) -> Result<Option<String>> {
    let sql = "SELECT kind FROM recipes.names WHERE name = $1";
    let what = format!("read the kind of {name}");
    let row = client
        .db()
        .query_opt(&what, sql, &[(&name, Type::TEXT)])
        .await?;
    Ok(row.map(|r| r.get(0)))
}

impl Client for PgClient {
    /// Rows of the schema `recipes` in both modes; see [`PgWaits`](crate::PgWaits).
    type Barrier = crate::barrier::PgWaits;

    fn barrier(&self, name: &str) -> Result<crate::Barrier> {
        Ok(crate::Barrier::from_backend(
            crate::barrier::PgWaits::barrier(self, name)?,
        ))
    }

    fn double_barrier(&self, name: &str, count: u32) -> Result<crate::DoubleBarrier> {
        let backend = crate::barrier::PgWaits::double(self, name, count)?;
        Ok(crate::DoubleBarrier::from_backend(backend))
    }

    fn store(&self) -> &'static str {
        "pg"
    }

    /// The live rows of the name's queue, by `seq` (the first holds or
    /// leads); `created` is the `seq`. For a name used in session mode
    /// (whichever mode this client is in), first the backends that hold or
    /// wait for the name's advisory lock (`created` is the PID), then the
    /// rows (an election's).
    fn contenders(&self, name: &str) -> Result<Vec<Contender>> {
        validate_name("lock", name)?;
        let (client, name) = (self.clone(), name.to_owned());
        self.call("list contenders", async move {
            let kind = kind_of(&client, &name).await?;
            let rw = kind.as_deref() == Some(ADVISORY_RW);
            let session =
                client.mode() == PgMode::Session || rw || kind.as_deref() == Some(ADVISORY);
            let mut all = match session {
                true => read_advisory_holders(&client, vec![name.clone()], rw).await?,
                false => Vec::new(),
            };
            all.extend(read_contenders(&client, &name).await?);
            Ok(all)
        })
    }

    /// The name's counter: the fence its last holder or leader minted,
    /// in either mode (a semaphore's permits have none).
    fn holder_fence(&self, name: &str) -> Result<Option<u64>> {
        validate_name("lock", name)?;
        let (client, name) = (self.clone(), name.to_owned());
        self.call("read the fence", async move {
            let sql = "SELECT fence FROM recipes.names \
                       WHERE name = $1 AND kind IN ('lock', 'rwlock', $2, $3) AND fence > 0";
            let what = format!("read the fence of {name}");
            let params: crate::db::Params<'_> = &[
                (&name, Type::TEXT),
                (&ADVISORY, Type::TEXT),
                (&ADVISORY_RW, Type::TEXT),
            ];
            let row = client.db().query_opt(&what, sql, params).await?;
            Ok(row.map(|r| r.get::<_, i64>(0).unsigned_abs()))
        })
    }

    fn permits(&self, name: &str) -> Result<(Option<u32>, Vec<Contender>)> {
        validate_name("semaphore", name)?;
        let (client, name) = (self.clone(), name.to_owned());
        self.call("list permits", async move {
            let sql = "SELECT permits FROM recipes.names WHERE name = $1 AND kind = 'semaphore'";
            let what = format!("read the size of {name}");
            let row = client
                .db()
                .query_opt(&what, sql, &[(&name, Type::TEXT)])
                .await?;
            let size = row
                .and_then(|r| r.get::<_, Option<i64>>(0))
                .and_then(|n| u32::try_from(n).ok());
            let permits = permits_name(&name);
            let session = used_in_session_mode(&client, &permits, ADVISORY_PERMITS).await?;
            let held = match (session, size) {
                (true, Some(n)) => {
                    let keys = (0..n as usize)
                        .map(|i| key_name(&permits, i, ADVISORY_PERMITS))
                        .collect();
                    read_advisory_holders(&client, keys, false).await?
                }
                _ => read_contenders(&client, &permits).await?,
            };
            Ok((size, held))
        })
    }

    /// A read of `recipes.kv`, where fenced writes land.
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let (client, key) = (self.clone(), key.to_owned());
        self.call("read", async move {
            let sql = "SELECT value FROM recipes.kv WHERE key = $1";
            let row = client
                .db()
                .query_opt("read", sql, &[(&key, Type::TEXT)])
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn session_id(&self) -> Option<i64> {
        self.leases().current().map(|s| s.id())
    }

    fn granted_ttl(&self) -> Duration {
        self.leases().granted_ttl()
    }

    /// `SELECT 1` on the statement connection.
    fn ping(&self) -> Result<Duration> {
        let client = self.clone();
        let started = Instant::now();
        self.call("ping", async move {
            client.db().query("ping", "SELECT 1", &[]).await?;
            Ok(started.elapsed())
        })
    }

    /// The earliest over the session row and, in session mode, every live
    /// lock connection.
    fn last_acknowledged(&self) -> Option<BootInstant> {
        let row = self.leases().last_acknowledged();
        self.earliest(row, |s| s.epoch().last_acknowledged_send())
    }

    /// The earliest over the session row and, in session mode, every live
    /// lock connection.
    fn valid_until(&self) -> Option<BootInstant> {
        let row = self.leases().valid_until();
        self.earliest(row, |s| s.epoch().valid_until())
    }

    /// Deletes the session row, so every entry goes at once, then stops
    /// the runtime.
    fn close_within(&self, grace: Duration) -> Result<()> {
        self.leases().close_within(grace)
    }

    type Counter = crate::counter::PgCounter;

    /// A row of `recipes.names` of kind `counter`; see
    /// [`PgCounter`](crate::counter::PgCounter).
    fn counter_of(
        &self,
        name: &str,
        kind: recipes_core::CounterKind,
    ) -> Result<recipes_core::Counter<crate::counter::PgCounter>> {
        let backend = crate::counter::PgCounter::new(self, name, kind)?;
        Ok(recipes_core::Counter::from_backend(backend))
    }

    /// Rows of the schema `recipes` in both modes; see [`crate::Group`].
    type Group = crate::barrier::PgWaits;

    fn group(&self, name: &str) -> Result<crate::Group> {
        Ok(crate::Group::from_backend(crate::barrier::PgWaits::group(
            self, name,
        )?))
    }
}
