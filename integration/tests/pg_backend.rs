//! What only the PostgreSQL backend has: its URL, its roles and
//! privileges, its versioned schema, transactions fenced by a held lock,
//! and the faults of a database — a terminated backend, a stalled
//! transaction, a paused holder's transaction. Tests whose names contain
//! `fault` get their own server and run one at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::pg_server::PG_USER;
use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until, PgFacts, PgServer};
use recipes_core::{BootInstant, Client, Error, LossReason};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, PgClient};

const TTL: Duration = Duration::from_secs(2);

fn name(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("/pg-backend/{test}-{}-{n}", std::process::id())
}

/// A table of the test's own, `(fence bigint)`; its name.
fn table(server: &PgServer, test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = format!("app_{test}_{}_{n}", std::process::id());
    server.sql(&format!("CREATE TABLE {t} (fence bigint NOT NULL)"));
    t
}

fn fences(server: &PgServer, table: &str) -> Vec<String> {
    let out = server.sql(&format!("SELECT fence FROM {table} ORDER BY fence"));
    out.lines().map(str::to_owned).collect()
}

fn connect(url: &str, ttl: Duration) -> recipes_core::Result<PgClient> {
    PgClient::builder(url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
}

fn grant(server: &PgServer, role: &str) {
    server.sql(&format!(
        "GRANT USAGE ON SCHEMA recipes TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA recipes TO {role}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA recipes TO {role}"
    ));
}

#[test]
fn bad_urls_are_invalid_argument_and_an_unreachable_server_is_named_in_time() {
    for bad in [
        "",
        "127.0.0.1:5432",
        "http://127.0.0.1:5432/recipes",
        "postgres://u@h:port/db",
        "postgres:///recipes",
        "host=127.0.0.1 user=postgres",
    ] {
        match connect(bad, TTL) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("postgres://"), "{bad}: {m}"),
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    let free = integration::ports::reserve_port();
    let url = format!("postgres://postgres:hidden@{}/recipes", free.addr());
    let started = Instant::now();
    match connect(&url, TTL) {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains(&free.addr().to_string()), "{message}");
            assert!(
                !message.contains("hidden"),
                "the password is not shown: {message}"
            );
        }
        other => panic!("nothing listens: expected Backend, got {other:?}"),
    }
    let bound = scale(Duration::from_secs(6));
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
}

/// A role that must give a password (scram), and what a wrong one and an
/// unknown role get.
#[test]
fn a_wrong_password_or_an_unknown_role_is_unauthenticated() {
    let server = PgServer::start();
    server.sql("CREATE ROLE pw_user LOGIN SUPERUSER PASSWORD 'right'");
    let hba = server.dir().join("data/pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    let ours = "host all pw_user 127.0.0.1/32 scram-sha-256\n";
    std::fs::write(&hba, format!("{ours}{rules}")).expect("write pg_hba.conf");
    server.sql("SELECT pg_reload_conf()");
    let url = |who: &str| format!("postgres://{who}@{}/recipes", server.addr());
    wait_until(
        "the password rule is in force",
        scale(Duration::from_secs(10)),
        || {
            matches!(
                connect(&url("pw_user:wrong"), TTL),
                Err(Error::Unauthenticated { .. })
            )
        },
    );
    match connect(&url("pw_user:wrong"), TTL) {
        Err(Error::Unauthenticated { what }) => assert!(!what.contains("wrong"), "{what}"),
        other => panic!("a wrong password: {other:?}"),
    }
    match connect(&url("nobody"), TTL) {
        Err(Error::Unauthenticated { .. }) => {}
        other => panic!("an unknown role: {other:?}"),
    }
    let c = connect(&url("pw_user:right"), TTL).expect("the right password");
    c.close().unwrap();
}

/// Without `CREATE` on the database the schema cannot be made; without
/// grants on it, it cannot be used; with them, it works. Nothing is left
/// by the refusals.
#[test]
fn missing_privileges_are_permission_denied_until_granted() {
    let server = PgServer::start();
    let url = server.url_as(PG_USER);
    match connect(&url, TTL) {
        Err(Error::PermissionDenied { what }) => assert!(what.contains("schema"), "{what}"),
        other => panic!("creating the schema without CREATE: {other:?}"),
    }
    PgClient::builder(server.url())
        .init()
        .expect("the superuser creates the schema");
    assert!(
        PgFacts::new(server.addr()).sessions().is_empty(),
        "init opens no session"
    );
    let admin = connect(&server.url(), TTL).expect("the superuser connects");
    match connect(&url, TTL) {
        Err(Error::PermissionDenied { .. }) => {}
        other => panic!("using the schema without grants: {other:?}"),
    }
    grant(&server, PG_USER);
    let user = connect(&url, TTL).expect("with the grants");
    let lock = name("privileges");
    let g = user.mutex(&lock).unwrap().lock().unwrap();
    g.put(&format!("{lock}-resource"), b"x").unwrap();
    g.release().unwrap();
    user.close().unwrap();
    admin.close().unwrap();
    assert!(
        PgFacts::new(server.addr()).sessions().is_empty(),
        "no session left"
    );
}

/// Clients that connect to an empty database at once create the schema
/// once between them (failed before: "relation layout already exists").
#[test]
fn clients_connecting_at_once_to_an_empty_database_all_connect() {
    let server = PgServer::start();
    let url = server.url();
    let go = Arc::new(std::sync::Barrier::new(8));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (url, go) = (url.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                connect(&url, TTL)
            })
        })
        .collect();
    for c in clients {
        c.join()
            .unwrap()
            .expect("every client connects")
            .close()
            .unwrap();
    }
}

#[test]
fn a_layout_of_another_version_is_refused() {
    let server = PgServer::start();
    connect(&server.url(), TTL).unwrap().close().unwrap();
    server.sql("UPDATE recipes.layout SET version = 2");
    match connect(&server.url(), TTL) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("layout version 2"), "{m}"),
        other => panic!("a newer layout: {other:?}"),
    }
    assert!(PgFacts::new(server.addr()).sessions().is_empty());
}

#[test]
fn a_fenced_transaction_commits_only_while_the_lock_is_ours() {
    let server = PgServer::shared();
    let t = table(server, "tx");
    let lock = name("tx");
    let (a, b) = (
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let fence = held.token().get() as i64;
    let insert = format!("INSERT INTO {t} (fence) VALUES ($1)");
    let n = held
        .transaction(|tx| tx.execute(&insert, &[(&fence, Type::INT8)]))
        .expect("a transaction of the holder commits");
    assert_eq!(n, 1);
    // The caller's error rolls back.
    let failed = held.transaction(|tx| {
        tx.execute(&insert, &[(&(fence + 1000), Type::INT8)])?;
        Err::<(), _>(Error::invalid("the caller changed its mind"))
    });
    assert!(
        matches!(failed, Err(Error::InvalidArgument(_))),
        "{failed:?}"
    );
    assert_eq!(fences(server, &t), vec![fence.to_string()]);

    // Another holder after ours was deleted: ours is stale and writes
    // nothing, theirs commits.
    PgFacts::new(server.addr()).delete(held.holder());
    held.lost().wait_timeout(scale(Duration::from_secs(10)));
    let next = b.mutex(&lock).unwrap().lock().unwrap();
    assert!(next.token() > held.token());
    let stale = held.transaction(|tx| tx.execute(&insert, &[(&fence, Type::INT8)]));
    assert!(
        matches!(stale, Err(Error::FenceRejected { .. })),
        "{stale:?}"
    );
    let newer = next.token().get() as i64;
    next.transaction(|tx| tx.execute(&insert, &[(&newer, Type::INT8)]))
        .unwrap();
    assert_eq!(
        fences(server, &t),
        vec![fence.to_string(), newer.to_string()]
    );
    next.release().unwrap();
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn a_semaphore_admits_at_most_its_permits() {
    let server = PgServer::shared();
    let sem = name("sem");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let c = connect(&server.url(), Duration::from_secs(10)).unwrap();
            let (inside, most, sem) = (inside.clone(), most.clone(), sem.clone());
            std::thread::spawn(move || {
                let s = c.semaphore(&sem, 3).unwrap();
                for _ in 0..5 {
                    let p = s.acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    p.put(&format!("{sem}-resource"), b"x").unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().unwrap();
                }
                c.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} at once",
        most.load(Ordering::SeqCst)
    );
    assert!(PgFacts::new(server.addr()).entries_under(&sem).is_empty());
}

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
    let mut old = Worker::start(&worker_binary(), "old", dir.path());
    old.ok(
        &format!("connect pg {} {}", server.url(), TTL.as_millis()),
        Duration::from_secs(15),
    );
    let reply = old.ok(&format!("lock {lock}"), Duration::from_secs(10));
    let field = |k: &str| {
        reply
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(k))
            .expect("field")
            .to_owned()
    };
    let (old_token, old_holder) = (field("token="), field("holder="));
    old.ok(&format!("txwrite {t} {old_token}"), Duration::from_secs(10));
    old.pause();
    wait_until(
        "the paused holder's entry expires",
        scale(TTL + Duration::from_secs(10)),
        || !facts.exists(&old_holder),
    );
    let c = connect(&server.url(), Duration::from_secs(10)).unwrap();
    let new = c.mutex(&lock).unwrap().lock().unwrap();
    let new_token = new.token().get() as i64;
    assert!(new_token > old_token.parse().unwrap());
    new.transaction(|tx| {
        tx.execute(
            &format!("INSERT INTO {t} (fence) VALUES ($1)"),
            &[(&new_token, Type::INT8)],
        )
    })
    .unwrap();
    old.resume();
    let refused = old
        .request(&format!("txwrite {t} {old_token}"), Duration::from_secs(30))
        .expect_err("the old holder's transaction is refused");
    assert!(refused.starts_with("fence-rejected"), "{refused}");
    assert_eq!(fences(&server, &t), vec![old_token, new_token.to_string()]);
    new.release().unwrap();
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
