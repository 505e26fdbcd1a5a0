//! The PostgreSQL backend's versioned schema: a layout of another version
//! is refused, an older one is upgraded in place by the first client of
//! this release, with its rows (held locks included) still valid.

mod pg_common;

use std::time::Duration;

use integration::pg_server::PG_USER;
use integration::{scale, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};

/// What turns this release's layout (7) back into layout 5 (but for the
/// functions, which the upgrade replaces whole): the queue's
/// foreign key on `name` again (no `name_ref`), no `queue_writers`, one
/// trigger for every event, which notified and decided in its function.
const LAYOUT_5: &str = "DROP TRIGGER queue_notify ON recipes.queue; \
     DROP TRIGGER queue_notify_insert ON recipes.queue; \
     CREATE TRIGGER queue_notify AFTER INSERT OR UPDATE OR DELETE ON recipes.queue \
       FOR EACH ROW EXECUTE FUNCTION recipes.notify_queue(); \
     DROP INDEX recipes.queue_writers; \
     ALTER TABLE recipes.queue DROP CONSTRAINT queue_name_fkey; \
     ALTER TABLE recipes.queue DROP COLUMN name_ref; \
     ALTER TABLE recipes.queue ADD CONSTRAINT queue_name_fkey \
       FOREIGN KEY (name) REFERENCES recipes.names (name); \
     UPDATE recipes.layout SET version = 5";

#[test]
fn a_layout_of_another_version_is_refused() {
    let server = PgServer::start();
    connect(&server.url(), TTL).unwrap().close().unwrap();
    server.sql("UPDATE recipes.layout SET version = 8");
    match connect(&server.url(), TTL) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("layout version 8"), "{m}"),
        other => panic!("a newer layout: {other:?}"),
    }
    assert!(PgFacts::new(server.addr()).sessions().is_empty());
}

/// Layout 1 (before session mode's heartbeat table, the entries' role and
/// the queue's functions) is upgraded to 7 by the first client that
/// connects; its rows stay.
#[test]
fn a_layout_1_schema_is_upgraded() {
    let server = PgServer::start();
    let c = connect(&server.url(), TTL).unwrap();
    let lock = name("upgraded");
    let first = c.mutex(&lock).unwrap().lock().unwrap().token();
    c.close().unwrap();
    server.sql(LAYOUT_5);
    server.sql(
        "DROP TABLE recipes.advisory; ALTER TABLE recipes.queue DROP COLUMN role; \
         DROP FUNCTION recipes.enter, recipes.look(text, bigint, text, bigint), \
         recipes.look(text, bigint, text, bigint, uuid), recipes.rw_gate, recipes.rw_confirm, \
         recipes.rw_held; DROP SEQUENCE recipes.rw_order; UPDATE recipes.layout SET version = 1",
    );
    let c = connect(&server.url(), TTL).expect("a layout 1 schema is upgraded");
    assert_eq!(
        server.sql("SELECT max(version) FROM recipes.layout").trim(),
        "7"
    );
    assert_eq!(
        server
            .sql(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                  WHERE n.nspname = 'recipes' \
                  AND p.proname IN ('enter', 'look', 'rw_gate', 'rw_confirm', 'rw_held')"
            )
            .trim(),
        "6",
        "layout 7's functions (the look twice: layout 6's call of it kept)"
    );
    assert_eq!(
        server
            .sql("SELECT to_regclass('recipes.advisory') IS NOT NULL")
            .trim(),
        "t"
    );
    let next = c.mutex(&lock).unwrap().lock().unwrap();
    assert!(next.token() > first, "the fence row survived the upgrade");
    next.release().unwrap();
    c.close().unwrap();
}

/// A layout 4 schema (before the read-write lock's gate and sequence) is
/// upgraded in place, and the sequence starts above every fence already
/// there: a fence pushed far ahead of the clock before the upgrade is
/// still below the next write token, and a reader's is above that.
#[test]
fn a_layout_4_schema_is_upgraded_and_tokens_go_on_above_its_fences() {
    let server = PgServer::start();
    let n = name("upgraded-4");
    let c = connect(&server.url(), TTL).unwrap();
    c.rw_lock(&n).unwrap().write().unwrap().release().unwrap();
    c.close().unwrap();
    server.sql(LAYOUT_5);
    server.sql(&format!(
        "DROP FUNCTION recipes.rw_gate, recipes.rw_confirm, recipes.rw_held; \
         DROP SEQUENCE recipes.rw_order; UPDATE recipes.layout SET version = 4; \
         UPDATE recipes.names SET fence = fence + 1000000000000 WHERE name = '{n}'"
    ));
    let ahead: u64 = server
        .sql(&format!(
            "SELECT fence FROM recipes.names WHERE name = '{n}'"
        ))
        .trim()
        .parse()
        .unwrap();
    let c = connect(&server.url(), TTL).expect("a layout 4 schema is upgraded");
    let rw = c.rw_lock(&n).unwrap();
    let w = rw.write().unwrap();
    assert!(
        w.token().0 > ahead,
        "{:?} after a fence of {ahead}",
        w.token()
    );
    let r = w.downgrade().unwrap();
    r.release().unwrap();
    let r = rw.read().unwrap();
    assert!(r.token().0 > ahead);
    r.release().unwrap();
    c.close().unwrap();
}

/// A schema of layout 2 (before the entry's role) is upgraded in place by
/// the first client of this release: a mutex row held across the upgrade
/// stays valid (its holder keeps it, another client waits behind it), and
/// the read-write lock works there at once.
#[test]
fn a_layout_2_schema_is_upgraded_in_place_and_its_rows_stay_valid() {
    use integration::pg_server::PG_SUPERUSER;
    let server = PgServer::shared();
    let db = format!("layout2_{}", std::process::id());
    let on_db = |sql: &str| {
        integration::psql::psql(server.addr(), PG_SUPERUSER, &db, sql, scale(TTL * 5))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    server.sql(&format!("DROP DATABASE IF EXISTS {db}"));
    server.sql(&format!("CREATE DATABASE {db}"));
    let url = server.url().replace("/recipes", &format!("/{db}"));
    let old = connect(&url, TTL).unwrap();
    let n = name("upgraded-2");
    let held = old.mutex(&n).unwrap().lock().unwrap();
    // What layout 2 was: no role column, no functions.
    on_db(LAYOUT_5);
    on_db(
        "ALTER TABLE recipes.queue DROP COLUMN role; DROP FUNCTION recipes.enter, recipes.look(text, bigint, text, bigint), \
         recipes.look(text, bigint, text, bigint, uuid), \
         recipes.rw_gate, recipes.rw_confirm, recipes.rw_held; DROP SEQUENCE recipes.rw_order; \
         UPDATE recipes.layout SET version = 2",
    );
    let new = connect(&url, TTL).unwrap();
    assert_eq!(on_db("SELECT max(version) FROM recipes.layout").trim(), "7");
    let column = "SELECT count(*) FROM information_schema.columns \
                  WHERE table_schema = 'recipes' AND table_name = 'queue' AND column_name = 'role'";
    assert_eq!(on_db(column).trim(), "1");
    let m = new.mutex(&n).unwrap();
    assert!(m.try_lock().unwrap().is_none(), "the old row still holds");
    let rw = recipes_core::Client::rw_lock(&new, &name("rw-after-upgrade")).unwrap();
    rw.write().unwrap().downgrade().unwrap().release().unwrap();
    held.release().unwrap();
    m.try_lock_for(scale(Duration::from_secs(5)))
        .unwrap()
        .expect("the mutex is free after the old holder released")
        .release()
        .unwrap();
    old.close().unwrap();
    new.close().unwrap();
    server.sql(&format!("DROP DATABASE {db}"));
}

/// A layout 5 schema is upgraded to 7 in place while a reader holds and
/// a writer waits behind it (rows of layout 5, which still referenced the
/// name's row): the reader keeps holding, a new reader queues behind the
/// writer (still fair), the writer gets in once the reader released, with
/// a token above its, and a reader after it above the writer's. After the
/// upgrade a read-write lock's rows reference no name's row (no
/// foreign-key lock on it), every other recipe's still do, and the
/// triggers are layout 6's.
#[test]
fn a_layout_5_schema_is_upgraded_while_a_reader_holds_and_a_writer_waits() {
    let server = PgServer::start();
    let (n, m) = (name("upgraded-5"), name("upgraded-5-mutex"));
    let old = connect(&server.url(), TTL).unwrap();
    let rw = old.rw_lock(&n).unwrap();
    let read = rw.read().unwrap();
    server.sql(LAYOUT_5);
    let writer = {
        let rw = old.rw_lock(&n).unwrap();
        std::thread::spawn(move || rw.write().unwrap())
    };
    let facts = PgFacts::new(server.addr());
    integration::wait_until("the writer queued", scale(Duration::from_secs(10)), || {
        facts.entries_under(&n).len() == 2
    });
    let new = connect(&server.url(), TTL).expect("a layout 5 schema is upgraded");
    assert_eq!(
        server.sql("SELECT max(version) FROM recipes.layout").trim(),
        "7"
    );
    let later = new.rw_lock(&n).unwrap();
    assert!(
        later.try_read().unwrap().is_none(),
        "a reader behind a queued writer"
    );
    assert!(
        later.try_write().unwrap().is_none(),
        "the old reader still holds"
    );
    let held = new.mutex(&m).unwrap().lock().unwrap();
    assert_eq!(
        server
            .sql(&format!(
                "SELECT count(*) FILTER (WHERE name_ref IS NULL) || ',' || \
                        count(*) FILTER (WHERE name_ref = name) FROM recipes.queue \
                 WHERE name IN ('{n}', '{m}')"
            ))
            .trim(),
        "2,1",
        "the read-write lock's rows reference no name's row, the mutex's does"
    );
    let triggers = "SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger \
                    WHERE tgrelid = 'recipes.queue'::regclass AND NOT tgisinternal";
    assert_eq!(
        server.sql(triggers).trim(),
        "queue_notify,queue_notify_insert"
    );
    let first = read.token();
    assert!(!writer.is_finished(), "a writer beside a reader");
    read.release().unwrap();
    let w = writer.join().unwrap();
    assert!(w.token() > first, "{:?} after {first:?}", w.token());
    let token = w.token();
    w.release().unwrap();
    let r = later.read().unwrap();
    assert!(r.token() > token, "{:?} after {token:?}", r.token());
    r.release().unwrap();
    held.release().unwrap();
    old.close().unwrap();
    new.close().unwrap();
    assert!(facts.entries_under(&n).is_empty());
}

/// A layout 6 schema's look and read-write confirm, whose signatures
/// layout 7 changed (our entry's uuid added), are replaced by the
/// upgrade: the old confirm goes, the old look stays as a call of the new
/// one (for a client of the last release still connected), and a client
/// of the last release that calls it still takes and waits for a lock.
#[test]
fn a_layout_6_schema_keeps_one_look_and_one_confirm() {
    let server = PgServer::start();
    connect(&server.url(), TTL).unwrap().close().unwrap();
    server.sql(
        "DROP FUNCTION recipes.look(text, bigint, text, bigint), \
           recipes.look(text, bigint, text, bigint, uuid), recipes.rw_confirm; \
         CREATE FUNCTION recipes.look(p_name text, p_seq bigint, p_role text, p_most bigint) \
           RETURNS TABLE (r_seq bigint, r_role text, r_fence bigint) LANGUAGE sql \
           AS 'SELECT NULL::bigint, NULL::text, NULL::bigint WHERE false'; \
         CREATE FUNCTION recipes.rw_confirm(p_name text, p_seq bigint, p_role text) \
           RETURNS bigint LANGUAGE sql AS 'SELECT NULL::bigint'; \
         UPDATE recipes.layout SET version = 6",
    );
    let c = connect(&server.url(), TTL).expect("a layout 6 schema is upgraded");
    let signatures = server.sql(
        "SELECT string_agg(p.oid::regprocedure::text, ';' ORDER BY p.proname) \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = 'recipes' AND p.proname IN ('look', 'rw_confirm')",
    );
    assert_eq!(
        signatures.trim(),
        "recipes.look(text,bigint,text,bigint);recipes.look(text,bigint,text,bigint,uuid);\
         recipes.rw_confirm(text,bigint,text,uuid)"
    );
    // The old look as the last release called it, for its entry's seq.
    let n = name("layout-6-old-call");
    let held = c.mutex(&n).unwrap().lock().unwrap();
    let seq = server.sql(&format!("SELECT seq FROM recipes.queue WHERE name = '{n}'"));
    let looked = server.sql(&format!(
        "SELECT r_fence IS NOT NULL FROM recipes.look('{n}', {}, NULL, 1)",
        seq.trim()
    ));
    assert_eq!(
        looked.trim(),
        "t",
        "the holder's entry holds, by the old call"
    );
    held.release().unwrap();
    let n = name("layout-6");
    c.mutex(&n).unwrap().lock().unwrap().release().unwrap();
    let rw = c.rw_lock(&n.replace("layout-6", "layout-6-rw")).unwrap();
    rw.write().unwrap().release().unwrap();
    c.close().unwrap();
}

/// Layout 7 as its first release made it: the read-write lock drew from
/// `recipes.rw_order` directly, without `recipes.rw_next` (the draw
/// floored by the database clock). The first client of this release
/// makes the functions again, the version staying 7, so the functions a
/// client of the first release calls floor their draws too, and this
/// release's own statements find `rw_next`. A role that does not own
/// the schema cannot, and is told who can.
#[test]
fn a_layout_7_schema_without_the_floored_draw_gets_it_and_keeps_its_version() {
    let server = PgServer::start();
    connect(&server.url(), TTL).unwrap().close().unwrap();
    server.sql("DROP FUNCTION recipes.rw_next()");
    // A role that may use the schema but does not own it cannot mend it.
    grant(&server, PG_USER);
    match connect(&server.url_as(PG_USER), TTL) {
        Err(Error::PermissionDenied { what }) => {
            assert!(what.contains("connect once as that role"), "{what}")
        }
        other => panic!("a role that does not own the schema: {other:?}"),
    }
    let c = connect(&server.url(), TTL).expect("layout 7 without rw_next is mended");
    connect(&server.url_as(PG_USER), TTL)
        .expect("the role that may use it connects once it is mended")
        .close()
        .unwrap();
    let found = server.sql(
        "SELECT max(version), to_regprocedure('recipes.rw_next()') IS NOT NULL FROM recipes.layout",
    );
    assert_eq!(found.trim(), "7|t");
    let rw = c.rw_lock(&name("layout-7-rw")).unwrap();
    let w = rw.write().unwrap();
    let written = w.token().get();
    w.release().unwrap();
    assert!(rw.read().unwrap().token().get() > written);
    c.close().unwrap();
}
