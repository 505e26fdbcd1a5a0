//! The faults of a database, on the PostgreSQL backend: a terminated
//! backend, a holder cut off, a stalled fenced transaction, a paused
//! holder's transaction, a renewal that commits late. Every test here has
//! its own server and runs one at a time (`fault` in the name).

mod pg_common;

use std::time::Duration;

use integration::pg_facts::advisory_holder;
use integration::pg_server::PG_USER;
use integration::test_dir::TestDir;
use integration::{scale, wait_until, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{BootInstant, Client, Error, LossPolicy, LossReason};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, PgClient};

/// A fenced transaction left idle (its client stopped renewing, as a
/// paused process would) holds the name's row in share mode; the server
/// ends it after the TTL, so the next holder gets the lock, and what the
/// stalled one wrote never commits.
#[test]
fn fault_a_stalled_fenced_transaction_cannot_block_the_lock_past_the_ttl() {
    let server = PgServer::start();
    let t = table(&server, "stalled");
    let lock = name("stalled");
    let (a, b) = (
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let fence = held.token().get() as i64;
    let insert = format!("INSERT INTO {t} (fence) VALUES ($1)");
    let (taken_tx, taken) = crossbeam_channel::bounded(1);
    let committed = held.transaction(|tx| {
        tx.execute(&insert, &[(&fence, Type::INT8)])?;
        a.orphan();
        let m = b.mutex(&lock).unwrap();
        std::thread::spawn(move || {
            let g = m.lock().expect("the next holder acquires");
            taken_tx.send((BootInstant::now(), g.token())).unwrap();
            g.release().unwrap();
        });
        // The stall: until the next holder has the lock.
        let bound = scale(TTL * 3 + Duration::from_secs(5));
        Ok(taken
            .recv_timeout(bound)
            .expect("the next holder acquires within the bound"))
    });
    assert!(
        committed.is_err(),
        "the stalled transaction did not commit: {committed:?}"
    );
    assert!(fences(&server, &t).is_empty(), "nothing of it landed");
    assert_eq!(held.lost().reason(), Some(LossReason::DeadlineExpired));
    drop(held);
    a.close().ok();
    b.close().unwrap();
}

/// One terminated backend is a dropped connection: the session row lives
/// on, the client reconnects and renews, and nobody else holds the lock
/// meanwhile.
#[test]
fn fault_a_terminated_backend_costs_no_lock() {
    let server = PgServer::start();
    let lock = name("terminated");
    let a = connect(&server.url(), Duration::from_secs(5)).unwrap();
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let killed = server.sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'recipes'",
    );
    assert_ne!(killed.trim(), "0", "the holder's backends were terminated");
    let after = BootInstant::now();
    wait_until(
        "a renewal after the kill",
        scale(Duration::from_secs(10)),
        || a.last_acknowledged().is_some_and(|t| t > after),
    );
    held.check().expect("the holder still holds");
    held.put(&format!("{lock}-resource"), b"after")
        .expect("a fenced write after the kill");
    let b = connect(&server.url(), Duration::from_secs(5)).unwrap();
    let other = b.mutex(&lock).unwrap();
    assert!(other
        .try_lock_for(Duration::from_millis(500))
        .unwrap()
        .is_none());
    let first = held.token();
    held.release().unwrap();
    let next = other.try_lock().unwrap().expect("free after the release");
    assert!(next.token() > first);
    next.release().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}

/// Under `LossPolicy::OnDisconnect` the same terminated backend is loss:
/// the guard fires `Disconnected` at once (long before its 5 s deadline),
/// another client takes the lock with a higher fence, and the client goes
/// on with a new session.
#[test]
fn fault_on_disconnect_a_terminated_backend_loses_the_lock_at_once() {
    let server = PgServer::start();
    let lock = name("on-disconnect");
    let a = PgClient::builder(server.url())
        .ttl(Duration::from_secs(5))
        .loss_policy(LossPolicy::OnDisconnect)
        .connect()
        .unwrap();
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let killed_at = std::time::Instant::now();
    let killed = server.sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'recipes'",
    );
    assert_ne!(killed.trim(), "0", "the holder's backends were terminated");
    assert!(
        held.lost()
            .wait_timeout(scale(Duration::from_secs(2)))
            .is_some(),
        "the guard was not lost at the disconnect"
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "before its deadline"
    );
    assert_eq!(held.lost().reason(), Some(LossReason::Disconnected));
    let first = held.token();
    drop(held);
    let b = connect(&server.url(), Duration::from_secs(5)).unwrap();
    let next = b
        .mutex(&lock)
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(10)))
        .unwrap()
        .expect("free once the lost session is revoked");
    assert!(next.token() > first);
    next.release().unwrap();
    let again = a.mutex(&lock).unwrap().lock().expect("a new session");
    again.release().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}

/// The holder cut off from the database (its backends terminated, and its
/// role may not log in again): its renewals fail, its loss fires at its
/// local deadline, and only after that does another client hold the lock.
#[test]
fn fault_a_holder_cut_off_from_the_database_loses_before_another_holds() {
    let server = PgServer::start();
    let admin = connect(&server.url(), Duration::from_secs(10)).unwrap();
    grant(&server, PG_USER);
    let lock = name("cut-off");
    let holder = connect(&server.url_as(PG_USER), TTL).unwrap();
    let held = holder.mutex(&lock).unwrap().lock().unwrap();
    let waiter = admin.mutex(&lock).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = waiter.lock().expect("the waiter acquires");
        tx.send(BootInstant::now()).unwrap();
        g
    });
    server.sql(&format!(
        "ALTER ROLE {PG_USER} NOLOGIN; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{PG_USER}'"
    ));
    let reason = held
        .lost()
        .wait_timeout(scale(TTL + Duration::from_secs(10)))
        .expect("the holder's loss fires");
    let valid_until = held.valid_until().expect("a deadline");
    let taken_at = rx
        .recv_timeout(scale(TTL + Duration::from_secs(10)))
        .expect("the waiter acquires");
    assert!(
        valid_until <= taken_at,
        "the holder was valid until {valid_until:?}, the waiter held at {taken_at:?} ({reason})"
    );
    let next = taker.join().unwrap();
    assert!(next.token() > held.token());
    server.sql(&format!("ALTER ROLE {PG_USER} LOGIN"));
    match held.put(&format!("{lock}-resource"), b"late") {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("the lost holder's fenced write: {other:?}"),
    }
    next.release().unwrap();
    drop(held);
    holder.close().ok();
    admin.close().unwrap();
}

/// A holder paused (SIGSTOP) past its TTL: the next holder's transaction
/// commits, and the old one's, sent after it resumed, is refused.
#[test]
fn fault_a_paused_holders_fenced_transaction_is_rejected() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    connect(&server.url(), TTL).unwrap().close().unwrap();
    let t = table(&server, "paused");
    let lock = name("paused");
    let dir = TestDir::new("pg-paused");
    let start = format!("connect pg {} {}", server.url(), TTL.as_millis());
    let (mut old, old_token, old_holder) = worker_holding(&dir, &start, &lock, &t);
    old.pause();
    wait_until(
        "the paused holder's entry expires",
        scale(TTL + Duration::from_secs(10)),
        || !facts.exists(&old_holder),
    );
    let c = connect(&server.url(), Duration::from_secs(10)).unwrap();
    the_next_holder_commits_and_the_paused_one_is_refused(
        &server, &c, &lock, &t, &mut old, &old_token,
    );
    c.close().unwrap();
}

/// A renewal that checked the row before its expiry but commits after it
/// (a slow commit: a disk, a synchronous standby): a waiter that saw the
/// old row expire must not hold while that renewal makes the holder live
/// again. Holder A is written by hand (its session row, its entry) and
/// renewed by the test's own connection inside an open transaction.
#[test]
fn fault_a_renewal_committed_after_the_expiry_was_seen_is_not_overtaken() {
    use integration::runtime::{block_on_timeout, runtime};
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let b = connect(&server.url(), Duration::from_secs(10)).unwrap();
    let lock = name("late-renewal");
    let a = server.sql(
        "INSERT INTO recipes.sessions (ttl, expires_at) \
         VALUES (interval '1500 ms', clock_timestamp() + interval '1500 ms') RETURNING id",
    );
    let a = a.trim().to_owned();
    server.sql(&format!(
        "INSERT INTO recipes.names (name, kind) VALUES ('{lock}', 'lock'); \
         INSERT INTO recipes.queue (name, seq, entry, session) \
         VALUES ('{lock}', 0, gen_random_uuid(), {a})"
    ));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let m = b.mutex(&lock).unwrap();
    std::thread::spawn(move || {
        let g = m.lock().expect("B acquires");
        tx.send(g.token()).unwrap();
        g
    });
    wait_until("B queues behind A", scale(Duration::from_secs(10)), || {
        facts.entries_under(&lock).len() == 2
    });

    let limit = scale(Duration::from_secs(5));
    let (renewer, connection) = block_on_timeout(
        limit,
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls),
    )
    .expect("connect in time")
    .expect("connect");
    runtime().spawn(connection);
    let old = server.sql(&format!(
        "SELECT expires_at FROM recipes.sessions WHERE id = {a}"
    ));
    let renewed = block_on_timeout(limit, async {
        renewer.batch_execute("BEGIN").await?;
        renewer
            .execute(
                &format!(
                    "UPDATE recipes.sessions SET expires_at = clock_timestamp() + ttl \
                     WHERE id = {a} AND expires_at > clock_timestamp()"
                ),
                &[],
            )
            .await
    })
    .expect("the renewal runs")
    .expect("the renewal is sent");
    assert_eq!(
        renewed, 1,
        "A's renewal came before its expiry (else the case did not run)"
    );
    // The commit is slow: B sees the old row expire meanwhile.
    let expired = format!("SELECT clock_timestamp() > '{}'::timestamptz", old.trim());
    wait_until(
        "A's old expiry passes",
        scale(Duration::from_secs(10)),
        || facts.sql(&expired).trim() == "t",
    );
    let blocked = "SELECT count(*) FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND application_name = 'recipes'";
    let early = crate::wait_for_either(&rx, || facts.sql(blocked).trim() != "0");
    block_on_timeout(limit, renewer.batch_execute("COMMIT"))
        .expect("commit in time")
        .expect("commit");
    let token = match early {
        Some(token) => token,
        None => rx
            .recv_timeout(scale(Duration::from_secs(10)))
            .expect("B acquires once A's renewed row expired"),
    };
    let a_expired = format!(
        "SELECT coalesce(bool_and(clock_timestamp() >= expires_at), true) \
         FROM recipes.sessions WHERE id = {a}"
    );
    assert_eq!(
        facts.sql(&a_expired).trim(),
        "t",
        "B holds (fence {token}) while A's renewed session is live"
    );
    b.close().unwrap();
}

/// Wait until `rx` has a value (returned) or `blocked()` holds (`None`).
fn wait_for_either<T>(
    rx: &crossbeam_channel::Receiver<T>,
    mut blocked: impl FnMut() -> bool,
) -> Option<T> {
    integration::wait_for(
        "B acquired or waits on a row lock",
        scale(Duration::from_secs(10)),
        || match rx.try_recv() {
            Ok(v) => Some(Some(v)),
            Err(_) if blocked() => Some(None),
            Err(_) => None,
        },
    )
}

/// Held entries of one name share its channel: the permit whose row is
/// deleted is lost within the bound, and its siblings on the same channel
/// are not (whether they were woken and looked again is not observable
/// here: `listen.rs`'s routing by seq is what keeps them asleep).
///
/// The client's poll of its held rows stays in reach (TTL 6 s: every
/// 2 s). A held row's watch listens from a task started after the
/// acquisition returns, and a deletion before its ear is in place is seen
/// by that poll alone (`entry.rs`, `watch_row`). With the poll out of the
/// way (TTL 120 s, a poll every 40 s) this test failed in 10-40 % of
/// isolated runs: the deletion raced the watch task (the runtime thread
/// then sat in `epoll_wait` until the 40 s poll, no watch in place to
/// hear it).
#[test]
fn fault_one_of_a_names_held_entries_deleted_loses_that_one_only() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let c = PgClient::builder(server.url())
        .ttl(Duration::from_secs(6))
        .poll_interval(Duration::from_secs(1))
        .connect()
        .unwrap();
    let sem = c.semaphore(&name("siblings"), 3).unwrap();
    let permits: Vec<_> = (0..3).map(|_| sem.acquire().unwrap()).collect();
    facts.delete(permits[1].holder());
    assert!(
        permits[1]
            .lost()
            .wait_timeout(scale(Duration::from_secs(10)))
            .is_some(),
        "the permit did not learn its row was deleted"
    );
    assert!(permits[0].check().is_ok() && permits[2].check().is_ok());
    let again = sem.acquire().unwrap();
    assert!(permits[0].check().is_ok() && permits[2].check().is_ok());
    for p in permits.into_iter().chain([again]) {
        let _ = p.release();
    }
    c.close().unwrap();
}

/// A permit's fenced transaction begun while it held commits before the
/// next permit is admitted in its place, even when its session expires
/// while it runs (here: its client stops renewing, and the transaction
/// runs past the TTL): the next permit's confirm waits for it. (While a
/// permit's check locked nothing, the next permit was admitted at the
/// expiry and wrote while the first one's transaction was still open: two
/// permits of one writing at once.)
#[test]
fn fault_a_permits_open_fenced_transaction_commits_before_the_next_permit_is_admitted() {
    permit_order(false, false);
}

/// The same in session mode, the permit's lock backend ended while its
/// transaction runs (here: terminated): the next holder of its key is
/// granted the key at once and waits out the first one's deadline, and its
/// fence's statement then waits for the transaction too. (While a permit's
/// check took nothing the next take waits on, the next permit wrote while
/// the first one's transaction was still open.)
#[test]
fn fault_a_session_mode_permits_open_fenced_transaction_commits_before_the_next_one() {
    permit_order(true, false);
}

/// As above, the next holder already waiting for the key at the server
/// when the first one's backend ends: granted then, it mints its fence
/// after the grant (`MINT_FENCE`, not the try's statement), under the
/// same gate.
#[test]
fn fault_a_session_mode_permits_open_fenced_transaction_commits_before_a_waiter() {
    permit_order(true, true);
}

/// A 1-permit semaphore's holder writes `a1`, `a2` in one fenced
/// transaction that outlives its lease; the next holder writes `b`, which
/// must come after both. `session`: the first holder's lock backend is
/// terminated meanwhile; `waiting`: the next holder waits for the key at
/// the server before that.
fn permit_order(session: bool, waiting: bool) {
    let server = PgServer::shared();
    let mode = if session { "session" } else { "lease" };
    let table = format!("app_permit_order_{mode}_{}", std::process::id());
    server.sql(&format!(
        "CREATE TABLE {table} (who text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
    ));
    let sem = format!("/pg-faults/permit-order-{mode}-{}", std::process::id());
    let short = |ttl: u64| {
        let (url, ttl) = (server.url(), Duration::from_secs(ttl));
        match session {
            true => pg_common::session(&url, ttl),
            false => connect(&url, ttl),
        }
        .unwrap()
    };
    let (a, b) = (short(2), short(30));
    let permit = a.semaphore(&sem, 1).unwrap().acquire().unwrap();
    let holder = permit.holder().to_owned();
    let (begun, started) = crossbeam_channel::bounded(1);
    let writing = {
        let (a, table) = (a.clone(), table.clone());
        std::thread::spawn(move || {
            permit.transaction(|tx| {
                tx.execute(&format!("INSERT INTO {table} (who) VALUES ('a1')"), &[])?;
                a.orphan();
                begun.send(()).unwrap();
                // Past the TTL: the session expires meanwhile.
                tx.execute("SELECT pg_sleep(6)", &[])?;
                tx.execute(&format!("INSERT INTO {table} (who) VALUES ('a2')"), &[])?;
                Ok(())
            })
        })
    };
    started.recv().unwrap();
    let waiter = waiting.then(|| {
        let next_sem = b.semaphore(&sem, 1).unwrap();
        let waiter = std::thread::spawn(move || next_sem.acquire());
        let facts = PgFacts::new(server.addr());
        let bound = integration::scale(Duration::from_secs(10));
        integration::wait_until("b waits for the key", bound, || {
            !facts.advisory(&sem, false).is_empty()
        });
        waiter
    });
    if session {
        assert!(
            advisory_holder(&holder).is_some(),
            "a session-mode holder names its backend"
        );
        PgFacts::new(server.addr()).terminate(&holder);
    }
    let next = match waiter {
        Some(waiter) => waiter.join().unwrap().unwrap(),
        None => b.semaphore(&sem, 1).unwrap().acquire().unwrap(),
    };
    next.transaction(|tx| {
        tx.execute(&format!("INSERT INTO {table} (who) VALUES ('b')"), &[])
            .map(drop)
    })
    .expect("the next permit writes");
    let first = writing.join().unwrap();
    let order = server.sql(&format!(
        "SELECT string_agg(who, ',' ORDER BY at) FROM {table}"
    ));
    assert_eq!(
        order.trim(),
        "a1,a2,b",
        "the next permit wrote before the first's transaction ended ({first:?})"
    );
    next.release().unwrap();
    b.close().unwrap();
    drop(a);
}
