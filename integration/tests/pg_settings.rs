//! What the server's and the roles' settings may not change: a timed
//! wait's `lock_timeout` stays with its statement, a role's
//! `statement_timeout` does not cut a wait for a lock, a default isolation
//! above READ COMMITTED is refused at connect, and session mode refuses
//! the advisory class lease mode's gate uses.

mod pg_common;

use std::time::Duration;

use integration::runtime::{block_on_timeout, runtime};
use integration::{scale, wait_for, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};
use recipes_pg::PgClient;

fn session(url: &str) -> recipes_core::Result<PgClient> {
    PgClient::builder(url)
        .ttl(TTL)
        .connect_timeout(Duration::from_secs(2))
        .session_mode()
        .connect()
}

/// A login role of this test process with `setting`, granted the schema
/// (made first).
fn role(server: &PgServer, test: &str, setting: &str) -> String {
    PgClient::builder(server.url()).init().expect("the schema");
    let role = format!("recipes_{test}_{}", std::process::id());
    server.sql(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; ALTER ROLE {role} SET {setting}"
    ));
    grant(server, &role);
    role
}

/// Whether a backend of `user` (any, when `None`) running our client has
/// waited for a lock longer than `at_least` in one statement.
fn waits_longer(facts: &PgFacts, user: Option<&str>, at_least: &str) -> bool {
    let user = user.map_or(String::new(), |u| format!("AND usename = '{u}'"));
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'recipes' \
         AND wait_event_type = 'Lock' AND clock_timestamp() - query_start > '{at_least}' {user}"
    );
    facts.sql(&sql).trim() != "0"
}

/// Run `take` on a thread; wait until it returned (`Some`) or `waiting()`
/// holds (`None`, the thread still running).
fn returned_or<T: Send + 'static>(
    take: impl FnOnce() -> T + Send + 'static,
    mut waiting: impl FnMut() -> bool,
) -> (crossbeam_channel::Receiver<T>, Option<T>) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || tx.send(take()).unwrap());
    let early = wait_for(
        "the call returned or waits",
        scale(Duration::from_secs(20)),
        || match rx.try_recv() {
            Ok(v) => Some(Some(v)),
            Err(_) if waiting() => Some(None),
            Err(_) => None,
        },
    );
    (rx, early)
}

/// A timed wait sets `lock_timeout` for its own statement only: before,
/// the setting stayed on the lock connection, and the next acquisition
/// there had its mint — which waits for a row lock like any `UPDATE` —
/// cut after the leftover milliseconds (55P03 as a backend error).
#[test]
fn a_timed_wait_leaves_no_lock_timeout_on_its_connection() {
    let server = PgServer::shared();
    let facts = PgFacts::new(server.addr());
    let lock = name("lock-timeout");
    let (a, b) = (
        session(&server.url()).unwrap(),
        session(&server.url()).unwrap(),
    );
    let held = b.mutex(&lock).unwrap().lock().unwrap();
    assert!(a
        .mutex(&lock)
        .unwrap()
        .try_lock_for(Duration::from_millis(50))
        .unwrap()
        .is_none());
    held.release().unwrap();
    // Another transaction holds the name's row: the next mint waits for it.
    let limit = scale(Duration::from_secs(5));
    let (admin, connection) = block_on_timeout(
        limit,
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls),
    )
    .expect("connect in time")
    .expect("connect");
    runtime().spawn(connection);
    let row = format!("SELECT 1 FROM recipes.names WHERE name = '{lock}' FOR SHARE");
    block_on_timeout(limit, admin.batch_execute(&format!("BEGIN; {row}")))
        .expect("in time")
        .expect("the row is locked");
    let m = a.mutex(&lock).unwrap();
    let (rx, early) = returned_or(
        move || m.try_lock().map(|g| g.map(|g| g.release())),
        || waits_longer(&facts, None, "500 ms"),
    );
    assert!(
        early.is_none(),
        "the mint did not wait for the row: {early:?}"
    );
    block_on_timeout(limit, admin.batch_execute("COMMIT"))
        .expect("in time")
        .expect("committed");
    let taken = rx.recv_timeout(limit).expect("the acquisition returns");
    assert!(matches!(taken, Ok(Some(Ok(())))), "{taken:?}");
    a.close().unwrap();
    b.close().unwrap();
}

/// A role's `statement_timeout` would cancel a wait for an advisory lock
/// (57014 as a backend error): lock connections turn it off, and the wait
/// runs as long as the caller asked. (A read-write lock's wait is one
/// statement to the deadline, so it shows: a mutex's is cut in slices.)
#[test]
fn a_roles_statement_timeout_does_not_cut_a_wait_for_a_lock() {
    let server = PgServer::shared();
    let facts = PgFacts::new(server.addr());
    let user = role(server, "st", "statement_timeout = '300ms'");
    let lock = name("statement-timeout");
    let holder = session(&server.url()).unwrap();
    let waiter = session(&server.url_as(&user)).unwrap();
    let held = holder.rw_lock(&lock).unwrap().write().unwrap();
    let rw = waiter.rw_lock(&lock).unwrap();
    let (rx, early) = returned_or(
        move || {
            rw.try_write_for(scale(Duration::from_secs(30)))
                .map(|g| g.map(|g| g.release()))
        },
        || waits_longer(&facts, Some(&user), "1 s"),
    );
    assert!(early.is_none(), "the wait ended early: {early:?}");
    held.release().unwrap();
    let taken = rx
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("the waiter returns");
    assert!(matches!(taken, Ok(Some(Ok(())))), "{taken:?}");
    waiter.close().unwrap();
    holder.close().unwrap();
}

/// A role whose transactions default to REPEATABLE READ is refused at
/// connect, in either mode, saying what to set; nothing is left.
#[test]
fn a_default_isolation_above_read_committed_is_refused_at_connect() {
    let server = PgServer::start();
    let user = role(
        &server,
        "iso",
        "default_transaction_isolation = 'repeatable read'",
    );
    let facts = PgFacts::new(server.addr());
    for session_mode in [false, true] {
        let mut b = PgClient::builder(server.url_as(&user)).connect_timeout(Duration::from_secs(2));
        if session_mode {
            b = b.session_mode();
        }
        match b.connect() {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("read committed") && m.contains(&user), "{m}")
            }
            other => panic!("connected under repeatable read: {other:?}"),
        }
    }
    assert!(facts.sessions().is_empty(), "no session was left");
}

/// Session mode may not use the advisory class lease mode's read-write
/// lock gate takes (`'recw'`): refused before anything is written.
#[test]
fn the_read_write_gates_advisory_class_is_refused_as_a_namespace() {
    let server = PgServer::shared();
    let r = PgClient::builder(server.url())
        .session_mode()
        .advisory_namespace(1_919_247_223)
        .connect();
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("1919247223"), "{m}"),
        other => panic!("{other:?}"),
    }
}
