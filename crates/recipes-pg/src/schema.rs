//! The schema `recipes`: its tables, its version, and its creation on
//! first use.
//!
//! ```text
//! recipes.layout    (version)                    the layout's version, one row
//! recipes.sessions  (id, ttl, expires_at)        a client's lease, in database time
//! recipes.names     (name, kind, next_seq,       one row per recipe name: its queue
//!                    fence, permits)             counter, its fence, a semaphore's size
//! recipes.queue     (name, seq, entry, session,  one row per contender, gone with its
//!                    value, role, name_ref)      session (ON DELETE CASCADE); role is a
//!                                                read-write lock entry's side ('read',
//!                                                'write'), NULL for other recipes;
//!                                                name_ref (generated: the name when role
//!                                                is NULL) references the name's row
//! recipes.kv        (key, value)                 what fenced puts and deletes write
//! recipes.advisory  (key, beat_at, ttl)          session mode: the last heartbeat of an
//!                                                advisory key's holder (NULL once released)
//! recipes.enter(…), recipes.look(…)              lease mode's enter and look of a queue,
//!                                                each minting the fence when ours holds
//! recipes.rw_order                               a sequence: read-write locks' seqs and
//!                                                tokens (schema-wide, never goes back)
//! recipes.rw_next(), rw_floor()                  a draw of it, kept within 10 ms of the
//!                                                database clock (an older backup restored)
//! recipes.rw_gate(…), rw_confirm(…), rw_held(…)  a read-write lock's gate (an advisory
//!                                                xact lock), confirm and fenced check
//! ```
//!
//! Layout 2 added `recipes.advisory`, layout 3 the column `recipes.queue.role`
//! (nullable: every row written before stays as it was, with no rewrite of
//! the table), layout 4 the functions `recipes.enter` and `recipes.look`
//! (`contend.sql`: a queue's enter and look, each with the fence bump
//! when ours holds, in one statement), layout 5 the sequence
//! `recipes.rw_order` and the read-write lock's gate (readers enter and
//! confirm together; see `contend.sql`), layout 6 the queue's reader fast
//! path: the foreign key to `recipes.names` moved to the generated column
//! `name_ref`, NULL on a read-write lock's rows (readers no longer lock the
//! name's row, which made a MultiXact per reader), the partial index
//! `queue_writers`, and the trigger split by event with `WHEN` conditions
//! ([`NOTIFY_BY_EVENT`]), layout 7 the look's and the read-write
//! confirm's argument of our entry's uuid (a seq drawn again after the
//! name's row was lost is not ours) and a permit's confirm that waits for
//! the fenced transactions of expired permits ahead ([`OLD_SIGNATURES`],
//! `contend.sql`; `recipes.rw_next` came later, with the version kept: a
//! layout 7 schema without it has its functions made again by the first
//! client of this release that owns it); an older schema is upgraded in place, in one transaction, by
//! the first client of this version that connects (which needs to own the
//! tables, as their creator does). A client of an older release then
//! refuses the schema (it knows only its own layout), so upgrade every
//! client of a database before the read-write lock is used there.
//!
//! Triggers on `recipes.queue` send `pg_notify('recipes_' || md5(name),
//! seq)` for every insert, update and delete (a cascade from a session's
//! end included), so that a waiter hears of the one entry it waits for,
//! whoever removed it — but not for a read-write lock entry's insert, nor
//! for a reader's own release (`recipes.release`, which notifies itself
//! only when a writer is queued behind it) (layout 5: no one waits on
//! those, and a NOTIFY serializes commits; see `contend.sql`; layout 6
//! decides it in the triggers' `WHEN` conditions, without a call).

use recipes_core::{Error, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use crate::sql::from_pg;

/// The layout this crate reads and writes.
pub(crate) const LAYOUT_VERSION: i32 = 7;

/// What layout 2 added: session mode's heartbeats, in database time, so
/// that a waiter granted a key whose holder ended without releasing it
/// (terminated, crashed, cut off) waits until that holder's own deadline
/// has passed.
const ADVISORY: &str = "CREATE TABLE recipes.advisory (
    key text PRIMARY KEY,
    beat_at timestamptz,
    ttl interval NOT NULL)";

/// What layout 3 added: a queue entry's role, for the read-write lock's
/// mixed queue of readers and writers. NULL (no default to write) for the
/// rows of every other recipe, so adding it rewrites nothing.
const ROLE: &str = "ALTER TABLE recipes.queue ADD COLUMN role text \
    CHECK (role IN ('read', 'write'))";

/// What layout 5 added: the read-write locks' sequence of seqs and
/// tokens. One cached value at a time (`CACHE 1`: a backend's cache would
/// hand out numbers out of order), started above every fence and seq
/// already in the schema and above the database clock in µs, so a token
/// never goes back, even after the schema was dropped and made again.
const RW_ORDER: &str = "CREATE SEQUENCE recipes.rw_order AS bigint CACHE 1;
SELECT setval('recipes.rw_order', greatest(
    (extract(epoch FROM clock_timestamp()) * 1000000)::int8,
    (SELECT max(fence) FROM recipes.names),
    (SELECT max(seq) FROM recipes.queue)))";

/// What layout 6 changed, so that a read-write lock's reader enters,
/// confirms and releases with no row lock but its own session's and no
/// trigger call (see `contend.sql`):
///
/// - The queue's foreign key to the name's row (`queue_name_fkey`, the
///   name kept) moves to `name_ref`, a stored generated column: the name
///   for every recipe's row but a read-write lock's (NULL: no check, so
///   no `FOR KEY SHARE` on the name's row, which several readers at once
///   turned into a new MultiXact per reader). What it guards stays guarded
///   for the recipes that delete their name's row (groups, barriers,
///   counters): none deletes a read-write lock's. Adding it rewrites the
///   queue (a moment, under the upgrade's lock); its rows stay.
/// - `queue_writers`: a read-write lock's writers by name and seq, which
///   a reader's enter and release look for (the primary key's range of
///   the name also walks every reader's row, live or dead).
/// - The trigger split by event, each with a `WHEN` condition evaluated
///   without calling the function ([`NOTIFY_BY_EVENT`]).
const NAME_REF: &str = "ALTER TABLE recipes.queue ADD COLUMN name_ref text
    GENERATED ALWAYS AS (CASE WHEN role IS NULL THEN name END) STORED;
ALTER TABLE recipes.queue DROP CONSTRAINT queue_name_fkey;
ALTER TABLE recipes.queue ADD CONSTRAINT queue_name_fkey
    FOREIGN KEY (name_ref) REFERENCES recipes.names (name);
CREATE INDEX queue_writers ON recipes.queue (name, seq) WHERE role = 'write'";

/// Layout 6's triggers on `recipes.queue`, both `recipes.notify_queue`
/// (which tells the name's channel the row's seq): `queue_notify` on every
/// update and delete but a reader's own release (`recipes.release`, which
/// tells a writer behind it itself), `queue_notify_insert` on the insert
/// of every entry but a read-write lock's (a waiter waits on an entry
/// ahead of its own, a holder on its own row: never on a later insert).
const NOTIFY_BY_EVENT: &str = "DROP TRIGGER queue_notify ON recipes.queue;
CREATE TRIGGER queue_notify AFTER UPDATE OR DELETE ON recipes.queue FOR EACH ROW
    WHEN (OLD.role IS DISTINCT FROM 'read'
          OR current_setting('recipes.releasing', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION recipes.notify_queue();
CREATE TRIGGER queue_notify_insert AFTER INSERT ON recipes.queue FOR EACH ROW
    WHEN (NEW.role IS NULL) EXECUTE FUNCTION recipes.notify_queue()";

/// What layout 7 changed: the look and the read-write confirm take our
/// entry's uuid beside its seq (`contend.sql`). `CREATE OR REPLACE` of a
/// new signature adds a function beside the old one: the old confirm goes
/// (only the old look called it); the old look stays, for clients of the
/// last release still connected, as a call of the new one
/// (`contend.sql`).
const OLD_SIGNATURES: &str = "DROP FUNCTION IF EXISTS recipes.rw_confirm(text, bigint, text);";

/// What layout 4 added: the functions that enter a queue and look at it
/// ([`crate::contend`]), so that an uncontended acquisition is one
/// statement and a handoff one more. Created again (`CREATE OR REPLACE`)
/// by the upgrade, and nothing else depends on them.
const FUNCTIONS: &str = include_str!("contend.sql");

/// Creates the layout, in one transaction (so a pooler keeps it on one
/// backend), serialized against other clients creating it at the same time
/// by a transaction-scoped advisory lock. Session ids start at the
/// database clock in µs, so a schema created again after it was dropped
/// never hands out the id of a session that a client of the old one still
/// renews.
const CREATE: &str = r#"
CREATE SCHEMA IF NOT EXISTS recipes;
CREATE TABLE recipes.layout (version integer NOT NULL);
INSERT INTO recipes.layout (version) VALUES (1);
CREATE TABLE recipes.sessions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ttl interval NOT NULL,
    expires_at timestamptz NOT NULL);
SELECT setval(pg_get_serial_sequence('recipes.sessions', 'id'),
              (extract(epoch FROM clock_timestamp()) * 1000000)::int8);
CREATE TABLE recipes.names (
    name text PRIMARY KEY,
    kind text NOT NULL,
    next_seq bigint NOT NULL DEFAULT 0,
    fence bigint NOT NULL DEFAULT 0,
    permits bigint);
CREATE TABLE recipes.queue (
    name text NOT NULL REFERENCES recipes.names (name),
    seq bigint NOT NULL,
    entry uuid NOT NULL UNIQUE,
    session bigint NOT NULL REFERENCES recipes.sessions (id) ON DELETE CASCADE,
    value bytea NOT NULL DEFAULT '',
    PRIMARY KEY (name, seq));
CREATE INDEX queue_session ON recipes.queue (session);
CREATE TABLE recipes.kv (key text PRIMARY KEY, value bytea NOT NULL);
CREATE FUNCTION recipes.notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('recipes_' || md5(COALESCE(OLD.name, NEW.name)),
                      COALESCE(OLD.seq, NEW.seq)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER queue_notify AFTER INSERT OR UPDATE OR DELETE ON recipes.queue
    FOR EACH ROW EXECUTE FUNCTION recipes.notify_queue();
"#;

/// Makes sure the layout exists in the version this crate knows: creates
/// it when missing, refuses a newer one. One statement when it exists.
/// `true` when this call created it.
///
/// # Errors
///
/// [`Error::PermissionDenied`] when the role may not read or create it;
/// [`Error::InvalidArgument`] for a layout of another version.
pub(crate) async fn ensure(db: &Client, what: &str) -> Result<bool> {
    let step = match version(db, what).await? {
        Some((found, _)) if found > LAYOUT_VERSION => return check(found).map(|()| false),
        Some((found, _)) if found < LAYOUT_VERSION => {
            format!("upgrade the schema recipes from layout {found}")
        }
        Some((_, true)) => return Ok(false),
        // Layout 7 as its first release made it: without `rw_next`.
        Some((_, false)) => "make the functions of the schema recipes again".to_owned(),
        None => "create the schema recipes".to_owned(),
    };
    let created = async {
        db.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(hashtext('recipes.layout'))")
            .await?;
        // Another client may have created or upgraded it while we waited
        // for the lock.
        let exists = db.query_typed_one(EXISTS, &[]).await?;
        let created = !exists.get::<_, bool>(0);
        let (found, current) = if created {
            db.batch_execute(CREATE).await?;
            (1, false)
        } else {
            let found = db.query_typed_one(VERSION, &[]).await?;
            (
                found.get::<_, Option<i32>>(0).unwrap_or(LAYOUT_VERSION),
                found.get(1),
            )
        };
        upgrade(db, found).await?;
        if found == LAYOUT_VERSION && !current {
            db.batch_execute(FUNCTIONS).await?;
        }
        db.batch_execute("COMMIT").await.map(|()| created)
    };
    let created = match created.await {
        Ok(created) => created,
        Err(e) => {
            // A failed statement leaves the transaction aborted.
            let _ = db.batch_execute("ROLLBACK").await;
            if step.starts_with("create") || e.code() != Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                return Err(from_pg(&format!("{what}: {step}"), e));
            }
            // Only the schema's owner may change it: no grant mends that.
            return Err(Error::PermissionDenied {
                what: format!(
                    "{what}: {step} for this release: only the role that owns it may \
                     (PostgreSQL said {}); connect once as that role (its creator), or run \
                     init as it, and then this role connects as before",
                    recipes_core::store::quote(e.as_db_error().map_or("", |d| d.message()))
                ),
            });
        }
    };
    match version(db, what).await? {
        Some((found, _)) => check(found).map(|()| created),
        None => Err(crate::sql::unexpected("recipes.layout is empty")),
    }
}

/// Make sure of the layout again after a statement found the schema or a
/// table of it missing: create it again when it is gone (the warning says
/// so), and refuse a schema that lacks some of its tables (dropped one by
/// one, by hand), which no client can use until it is dropped whole.
///
/// # Errors
///
/// As [`ensure`]'s; [`Error::Backend`] (not retryable) for a schema that
/// lacks some of its tables.
pub(crate) async fn recreate(db: &Client, shown: &str) -> Result<()> {
    let what = format!("create the schema recipes again at {shown}");
    if ensure(db, &what).await? {
        log::warn!(
            "[pg={shown}] the schema recipes was gone (dropped, or restored without it):              created it again; every lock held in it is lost, and fences go on above              every earlier one (they follow the database clock)"
        );
    }
    let sql = "SELECT coalesce(string_agg(t, ', '), '') FROM unnest($1::text[]) AS t \
               WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
                                 WHERE schemaname = 'recipes' AND tablename = t)";
    let tables = ["layout", "sessions", "names", "queue", "kv", "advisory"];
    let row = db
        .query_typed_one(
            sql,
            &[(&&tables[..], tokio_postgres::types::Type::TEXT_ARRAY)],
        )
        .await
        .map_err(|e| from_pg(&what, e))?;
    let missing: String = row.get(0);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Backend {
        message: format!(
            "the schema recipes at {shown} lacks its tables {missing} (dropped by hand): \
             no client can use it; drop it whole (DROP SCHEMA recipes CASCADE) so that the \
             next client creates it again, or restore it"
        ),
        retryable: false,
        source: None,
    })
}

/// Bring a layout of version `found` (created as 1, or found older) up to
/// [`LAYOUT_VERSION`], inside the caller's transaction: each step adds,
/// or (layout 6) moves a constraint to a column computed from the row and
/// remakes the triggers, so the rows already there stay valid.
async fn upgrade(db: &Client, found: i32) -> std::result::Result<(), tokio_postgres::Error> {
    if found < 2 {
        db.batch_execute(ADVISORY).await?;
    }
    if found < 3 {
        db.batch_execute(ROLE).await?;
    }
    if found < 5 {
        db.batch_execute(RW_ORDER).await?;
    }
    if found < 6 {
        db.batch_execute(NAME_REF).await?;
        db.batch_execute(NOTIFY_BY_EVENT).await?;
    }
    if found < 7 {
        db.batch_execute(OLD_SIGNATURES).await?;
    }
    if found < LAYOUT_VERSION {
        // Each layout from 4 on replaced the functions and added its own.
        db.batch_execute(FUNCTIONS).await?;
        let set = format!("UPDATE recipes.layout SET version = {LAYOUT_VERSION}");
        db.batch_execute(&set).await?;
    }
    Ok(())
}

/// Refuse a database or role whose transactions default to an isolation
/// above READ COMMITTED: the queue's functions and the mints judge the
/// queue and the fences on the snapshot of each statement, taken after the
/// row lock it waited for (`contend.sql`); one snapshot for the whole
/// transaction would judge on what it saw before the wait, or fail with
/// serialization errors under contention.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the setting and how to set it back.
pub(crate) async fn check_isolation(db: &Client, what: &str) -> Result<()> {
    let sql = "SELECT current_setting('default_transaction_isolation'), current_user::text";
    let row = db
        .query_typed_one(sql, &[])
        .await
        .map_err(|e| from_pg(&format!("{what}: read default_transaction_isolation"), e))?;
    let (isolation, user): (String, String) = (row.get(0), row.get(1));
    if isolation == "read committed" {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{what}: transactions here default to {isolation} (default_transaction_isolation), \
         and the recipes' statements need read committed, each seeing what committed \
         before it after the row lock it waited for; set it back for the client's role: \
         ALTER ROLE {user} SET default_transaction_isolation = 'read committed'"
    )))
}

/// Whether `recipes.layout` exists, read from the catalog with a fresh
/// snapshot: `to_regclass` reads the backend's catalog cache, which an
/// advisory lock does not refresh, so a client that waited for another's
/// creation still saw none (measured: "relation layout already exists"
/// with four clients connecting at once).
const EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
                      WHERE schemaname = 'recipes' AND tablename = 'layout')";

/// The layout's version, and whether the functions are this release's:
/// layout 7's first release made them without `recipes.rw_next` (the
/// read-write lock's draw floored by the clock, `contend.sql`), and its
/// clients call the functions made again, whose signatures are the same.
/// Read from the catalog, as [`EXISTS`] is.
const VERSION: &str = "SELECT max(version), EXISTS (SELECT 1 FROM pg_catalog.pg_proc p \
                       JOIN pg_catalog.pg_namespace s ON s.oid = p.pronamespace \
                       WHERE s.nspname = 'recipes' AND p.proname = 'rw_next') \
                       FROM recipes.layout";

/// The layout's version and whether its functions are this release's
/// ([`VERSION`]), `None` when it does not exist.
async fn version(db: &Client, what: &str) -> Result<Option<(i32, bool)>> {
    let read = async {
        let exists = db.query_typed_one(EXISTS, &[]).await?;
        if !exists.get::<_, bool>(0) {
            return Ok(None);
        }
        let row = db.query_typed_one(VERSION, &[]).await?;
        Ok(row.get::<_, Option<i32>>(0).map(|v| (v, row.get(1))))
    };
    read.await
        .map_err(|e| from_pg(&format!("{what}: read recipes.layout"), e))
}

fn check(found: i32) -> Result<()> {
    if found == LAYOUT_VERSION {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the schema recipes has layout version {found}, this client knows version \
         {LAYOUT_VERSION}: use a recipes-pg release for layout {found}, or another database"
    )))
}
