//! A session-mode holder's fence or token, minted on the connection that
//! holds the name's advisory key: by a mutex's or a permit's try in the
//! statement that takes the key ([`take_and_mint`]), else right after the
//! grant ([`mint_fence`]; see `slots.rs`).

use std::time::Duration;

use recipes_core::Result;
use tokio_postgres::types::Type;

use crate::advisory::On;
use crate::advisory_lock::{gate_class, slot_gate};
use crate::client::PgClient;
use crate::names::other_layout;
use crate::slots::ADVISORY_RW;
use crate::sql::{fence_floor, from_pg, is_schema_gone};

/// The first part of every mint: the previous holders' remaining time
/// (`old`) and our heartbeat's stamp (`beat`); see [`mint_fence`].
macro_rules! mint_head {
    () => {
        "WITH old AS (SELECT max(extract(epoch FROM beat_at + ttl - clock_timestamp()))::float8 \
           AS remaining FROM recipes.advisory WHERE beat_at IS NOT NULL \
           AND (key = $3 OR ($6 AND starts_with(key, $3 || chr(31) || 'reader-')))), \
         beat AS (INSERT INTO recipes.advisory AS a (key, beat_at, ttl) \
           SELECT $5, clock_timestamp(), $4 * interval '1 millisecond' \
           WHERE $4::int8 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM old WHERE remaining > 0) \
           ON CONFLICT (key) DO UPDATE SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl) "
    };
}

/// A mutex's or a semaphore's fence: the name's row bumped; a permit's
/// behind its slot's gate (`slot_gate!`).
const MINT_FENCE: &str = concat!(
    mint_head!(),
    "INSERT INTO recipes.names AS n (name, kind, fence) SELECT $1, $2, ",
    fence_floor!(),
    " WHERE ",
    slot_gate!("hashtext($3)", "$2"),
    " ON CONFLICT (name) DO UPDATE SET fence = greatest(n.fence + 1, ",
    fence_floor!(),
    ") WHERE n.kind = $2 RETURNING n.fence, (SELECT remaining FROM old)"
);

/// A read-write lock's writer's token: the next of `recipes.rw_order`
/// (one value drawn), which is also the name's fence (the heartbeats
/// check it). The rows of readers that ended without releasing and whose
/// deadline passed over a minute ago go (`swept`): each backend's row has
/// a name of its own ([`crate::slots::reader_row`]), so nothing else
/// reuses them, and such a row no longer makes anyone wait.
const MINT_WRITE: &str = concat!(
    mint_head!(),
    ", swept AS (DELETE FROM recipes.advisory \
       WHERE starts_with(key, $3 || chr(31) || 'reader-') \
       AND beat_at + ttl < clock_timestamp() - interval '1 minute') \
     INSERT INTO recipes.names AS n (name, kind, fence) \
       VALUES ($1, $2, recipes.rw_next()) \
     ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence \
     WHERE n.kind = $2 RETURNING n.fence, (SELECT remaining FROM old)"
);

/// A read-write lock's reader's token: the next of `recipes.rw_order`,
/// the name's row only made if missing (its fence then this token, so a
/// writer's token is above it and ours is not below it), never locked:
/// readers mint together instead of one commit after another on the row.
/// Behind the name's gate, shared (`advisory_lock.rs`, `GATE`): a writer
/// whose backend lost the key may still be inside a fenced write or
/// transaction, which holds the gate exclusive, and no reader holds
/// before that commits.
const MINT_READ: &str = concat!(
    mint_head!(),
    ", token AS MATERIALIZED (SELECT recipes.rw_next() AS t \
       FROM (SELECT pg_advisory_xact_lock_shared(",
    gate_class!(),
    ", hashtext($1))) g), \
     made AS (INSERT INTO recipes.names (name, kind, fence) \
       SELECT $1, $2, t FROM token ON CONFLICT (name) DO NOTHING RETURNING kind) \
     SELECT (SELECT t FROM token), (SELECT remaining FROM old) \
     WHERE EXISTS (SELECT 1 FROM made) \
        OR EXISTS (SELECT 1 FROM recipes.names WHERE name = $1 AND kind = $2)"
);

/// Bump the fence of `name` (a row of `kind`, made on first use) on `c`,
/// the connection — and so the session or transaction — that holds the
/// name's advisory key `key`: strictly increasing across holders of either
/// scope, and floored by the database clock in µs, so it never goes back
/// when the schema is dropped or truncated (`fence_floor!` in `sql.rs`);
/// a read-write lock's token is the next of `recipes.rw_order` instead
/// ([`MINT_WRITE`], [`MINT_READ`]). In the same statement, read how long
/// the key's previous holder
/// may still believe it holds — its last heartbeat + its TTL, in database
/// time, unless it released the key — and, for a session holder
/// (`beat_ttl`, its TTL) when that is nothing, stamp our own heartbeat on
/// the key. The caller waits that long before it may use the lock (a
/// session holder then stamps, `stamp` in `slots.rs`): while it waits the old stamp
/// stays, so an acquisition cut off meanwhile never pushes the wait of
/// the next one further out.
///
/// `beat` names our heartbeat row: the key's own, or for a read-write
/// lock's reader `<key>` + U+001F + `reader-<pid>-<backend start>` (readers share the
/// key, each has its row; no name holds a control character, so no other
/// recipe's row is named so). A reader waits out the key's own row (a writer's); a writer
/// the readers' rows too.
///
/// # Errors
///
/// [`InvalidArgument`](recipes_core::Error::InvalidArgument) when the
/// name holds another kind of recipe (or the other mode's locks).
pub(crate) async fn mint_fence(
    client: &PgClient,
    c: On<'_>,
    name: &str,
    kind: &str,
    key: &str,
    beat: Beat<'_>,
    beat_ttl: Option<i64>,
) -> Result<(i64, Duration)> {
    let what = format!("mint the fence of {name}");
    // A read-write lock's writer waits out the readers' rows too.
    let (sql, after_readers) = match (kind, beat.reader) {
        (ADVISORY_RW, true) => (MINT_READ, false),
        (ADVISORY_RW, false) => (MINT_WRITE, true),
        _ => (MINT_FENCE, false),
    };
    let params: crate::db::Params<'_> = &[
        (&name, Type::TEXT),
        (&kind, Type::TEXT),
        (&key, Type::TEXT),
        (&beat_ttl, Type::INT8),
        (&beat.row, Type::TEXT),
        (&after_readers, Type::BOOL),
    ];
    let run = || answer(client, c, &what, sql, params);
    let mut rows = run().await?;
    if rows.is_empty() && sql == MINT_READ && stored_kind(client, name, &what).await? == kind {
        // Another reader made the name's row while our statement ran: our
        // snapshot did not show it; the next one does.
        rows = run().await?;
    }
    if let Some(row) = rows.first() {
        return Ok((row.get(0), left_of(name, row.get(1))));
    }
    Err(refusal(client, name, kind, &what).await)
}

/// A mutex's or a permit's try, taken and minted in one statement (one
/// round trip where a take and then [`mint_fence`] are two): the key
/// tried (`$1`, `hashtext($2)`) on our backend (`$5`) only when the
/// name's row (`$3`), if any, is of the kind (`$4`); when granted, the
/// name's fence bumped as [`MINT_FENCE`] bumps it; when minted, our
/// heartbeat stamped on the key (`$2`, the TTL `$6`) unless its row says a
/// previous holder that ended without releasing may still believe it
/// holds. That last test is the upsert's own, on the row's newest version
/// (locked), not on the statement's snapshot, which was taken before the
/// grant: a stamp or a clear committed between the two is seen. When the
/// stamp was left out, the caller reads the remaining time afresh
/// ([`remaining`]), waits it out and stamps, as after [`mint_fence`].
///
/// A take whose reply never reaches the caller (its RPC timeout passed,
/// the connection broke, the caller gave up) may have stamped: the epoch's
/// end unlocks the key, and the next holder waits out our TTL, as after a
/// lost reply of [`mint_fence`]'s statement before (one stamping
/// statement an acquisition either way). The database must run our
/// statements in READ COMMITTED (refused at connect otherwise), where the
/// upsert works on the newest version.
const TAKE_AND_MINT: &str = concat!(
    "WITH got AS MATERIALIZED (SELECT CASE WHEN pg_backend_pid() = $5 \
       THEN pg_try_advisory_lock($1, hashtext($2)) END AS ok, hashtext($2) AS h \
       WHERE NOT EXISTS (SELECT 1 FROM recipes.names WHERE name = $3 AND kind <> $4)), \
     minted AS (INSERT INTO recipes.names AS n (name, kind, fence) SELECT $3, $4, ",
    fence_floor!(),
    " FROM got WHERE ok AND ",
    slot_gate!("got.h", "$4"),
    " ON CONFLICT (name) DO UPDATE SET fence = greatest(n.fence + 1, ",
    fence_floor!(),
    ") WHERE n.kind = $4 RETURNING n.fence), \
     beat AS (INSERT INTO recipes.advisory AS a (key, beat_at, ttl) \
       SELECT $2, clock_timestamp(), $6 * interval '1 millisecond' FROM minted \
       WHERE $6::int8 IS NOT NULL \
       ON CONFLICT (key) DO UPDATE SET beat_at = EXCLUDED.beat_at, ttl = EXCLUDED.ttl \
       WHERE NOT coalesce(a.beat_at + a.ttl > clock_timestamp(), false) RETURNING 1) \
     SELECT ok, h, (SELECT fence FROM minted), EXISTS (SELECT 1 FROM beat) FROM got"
);

/// What [`take_and_mint`] found: the key not granted, or granted with its
/// fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Another backend holds the key.
    Busy,
    /// Ours, as `pg_locks.objid` shows it.
    Took { key: i64, minted: Minted },
}

/// A try's fence, and whether its statement stamped our heartbeat (when
/// not, a previous holder's deadline is to be waited out first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Minted {
    pub(crate) fence: i64,
    pub(crate) stamped: bool,
}

/// The one-statement try of a mutex's or a permit's key `key` (see
/// [`TAKE_AND_MINT`]) on the lock connection `c` of backend `pid`.
///
/// # Errors
///
/// [`InvalidArgument`](recipes_core::Error::InvalidArgument) when the
/// name holds another kind of recipe, [`crate::pooler::pooled`]'s error when
/// the statement ran on another backend (a pooler), backend errors. A key
/// granted but not minted (the name's row changed kind at that moment) is
/// the refusal too; the caller's epoch gives the key back.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn take_and_mint(
    client: &PgClient,
    c: On<'_>,
    namespace: i32,
    name: &str,
    kind: &str,
    key: &str,
    pid: i32,
    beat_ttl: Option<i64>,
) -> Result<Tried> {
    let what = format!("take the advisory lock of {key}");
    let params: crate::db::Params<'_> = &[
        (&namespace, Type::INT4),
        (&key, Type::TEXT),
        (&name, Type::TEXT),
        (&kind, Type::TEXT),
        (&pid, Type::INT4),
        (&beat_ttl, Type::INT8),
    ];
    let rows = answer(client, c, &what, TAKE_AND_MINT, params).await?;
    let Some(row) = rows.first() else {
        return Err(refusal(client, name, kind, &what).await);
    };
    match row.get::<_, Option<bool>>(0) {
        None => Err(crate::pooler::pooled(&client.db().shown)),
        Some(false) => Ok(Tried::Busy),
        Some(true) => match row.get::<_, Option<i64>>(2) {
            None => Err(refusal(client, name, kind, &what).await),
            Some(fence) => Ok(Tried::Took {
                key: i64::from(row.get::<_, i32>(1) as u32),
                minted: Minted {
                    fence,
                    stamped: row.get(3),
                },
            }),
        },
    }
}

/// `sql` with `params` on `c`, within the RPC timeout; a schema dropped
/// meanwhile is made again before the error returns (the acquisition then
/// starts over).
async fn answer(
    client: &PgClient,
    c: On<'_>,
    what: &str,
    sql: &str,
    params: crate::db::Params<'_>,
) -> Result<Vec<tokio_postgres::Row>> {
    let asked = async { c.query(sql, params).await.map_err(|e| from_pg(what, e)) };
    match recipes_core::store::within(what, client.rpc_timeout(), asked).await {
        Err(e) if is_schema_gone(&e) => Err(client.db().schema_gone(e).await),
        answered => answered,
    }
}

/// How long the previous holder of `key` may still believe it holds, read
/// now: its last heartbeat + its TTL, unless it released the key.
pub(crate) async fn remaining(client: &PgClient, c: On<'_>, key: &str) -> Result<Duration> {
    let what = format!("read the previous holder's deadline of {key}");
    let sql = "SELECT max(extract(epoch FROM beat_at + ttl - clock_timestamp()))::float8 \
               FROM recipes.advisory WHERE beat_at IS NOT NULL AND key = $1";
    let rows = recipes_core::store::within(&what, client.rpc_timeout(), async {
        c.query(sql, &[(&key, Type::TEXT)])
            .await
            .map_err(|e| from_pg(&what, e))
    })
    .await?;
    let left = rows.first().and_then(|r| r.get::<_, Option<f64>>(0));
    Ok(left_of(key, left))
}

/// A remaining time in seconds as a wait (none when past), logged when
/// there is one.
fn left_of(name: &str, seconds: Option<f64>) -> Duration {
    let left = seconds.unwrap_or(0.0).max(0.0);
    let left = Duration::try_from_secs_f64(left).unwrap_or(Duration::MAX);
    if !left.is_zero() {
        log::info!(
            "[{name}] its previous holder ended without releasing it: waiting {left:?} \
             for that holder's deadline"
        );
    }
    left
}

/// Whose heartbeat row a holder stamps, and which rows it waits out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Beat<'a> {
    /// Our row in `recipes.advisory`.
    pub(crate) row: &'a str,
    /// A read-write lock's reader: its token is drawn from
    /// `recipes.rw_order` and the name's row is left alone; a writer (of
    /// the same kind, not a reader) waits out the readers' rows too.
    pub(crate) reader: bool,
}

/// Why `name`'s row refused a lock of `kind`: the recipe it holds.
pub(crate) async fn refusal(
    client: &PgClient,
    name: &str,
    kind: &str,
    what: &str,
) -> recipes_core::Error {
    match stored_kind(client, name, what).await {
        Ok(stored) => other_layout(name, kind, &stored),
        Err(e) => e,
    }
}

/// Refuse a session-mode lock named like one of a semaphore's own queues
/// (`<sem>/locks`, `<sem>/leases`) or like one of its permits' keys
/// (`<sem>/leases/<i>`, which the lock would share) while `<sem>` is a
/// semaphore, as lease mode's enter refuses the first two: one surface in
/// both modes. No key but a permit's would be shared, and that only to
/// make the semaphore admit fewer, so the read need not be atomic with
/// the take: it runs when a handle is made ([`crate::locks`]) or a
/// transaction lock taken, only for such names.
pub(crate) async fn refuse_inside_semaphore(client: &PgClient, name: &str) -> Result<()> {
    let Some(semaphore) = crate::names::semaphore_of(name) else {
        return Ok(());
    };
    let what = format!("read the row of {semaphore}");
    if stored_kind(client, semaphore, &what).await? == "semaphore" {
        return Err(crate::names::inside_semaphore(name, semaphore));
    }
    Ok(())
}

/// The kind of `name`'s row now (empty when it has none).
async fn stored_kind(client: &PgClient, name: &str, what: &str) -> Result<String> {
    let sql = "SELECT kind FROM recipes.names WHERE name = $1";
    let row = (client.db())
        .query_opt(what, sql, &[(&name, Type::TEXT)])
        .await?;
    Ok(row.map(|r| r.get::<_, String>(0)).unwrap_or_default())
}
