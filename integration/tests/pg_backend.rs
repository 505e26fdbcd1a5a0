//! What only the PostgreSQL backend has: its URL, its roles and
//! privileges, its versioned schema, transactions fenced by a held lock.
//! Its faults are in `pg_faults.rs`.

mod pg_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::pg_server::PG_USER;
use integration::{scale, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, PgClient};

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

/// An `sslmode` this client does not know is refused before anything is
/// sent, naming the values it takes; nothing is left on the server.
#[test]
fn an_unknown_sslmode_is_invalid_argument_at_once_and_leaves_nothing() {
    let server = PgServer::start();
    for mode in ["bogus", "REQUIRE", "verify_full", ""] {
        let url = format!(
            "postgres://postgres@{}/recipes?sslmode={mode}",
            server.addr()
        );
        let started = Instant::now();
        match connect(&url, TTL) {
            Err(Error::InvalidArgument(m)) => {
                assert!(
                    m.contains("disable, require, verify-ca or verify-full"),
                    "{m}"
                )
            }
            other => panic!("sslmode={mode:?}: expected InvalidArgument, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2), "{mode}");
    }
    let left = server.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'recipes'; \
         SELECT count(*) FROM pg_namespace WHERE nspname = 'recipes'",
    );
    assert_eq!(left, "0\n0", "no connection and no schema left");
}

/// A role that must give a password (scram), and what a wrong one, none
/// and an unknown role get.
#[test]
fn a_wrong_password_or_an_unknown_role_is_unauthenticated() {
    let server = PgServer::start();
    server.add_password_role("pw_user", "right");
    let url = |who: &str| format!("postgres://{who}@{}/recipes", server.addr());
    match connect(&url("pw_user:wrong"), TTL) {
        Err(Error::Unauthenticated { what }) => assert!(!what.contains("wrong"), "{what}"),
        other => panic!("a wrong password: {other:?}"),
    }
    match connect(&url("nobody"), TTL) {
        Err(Error::Unauthenticated { what }) => {
            assert!(what.contains("user") && !what.contains("()"), "{what}")
        }
        other => panic!("an unknown role: {other:?}"),
    }
    match connect(&url("pw_user"), TTL) {
        Err(Error::Unauthenticated { what }) => assert!(what.contains("password"), "{what}"),
        other => panic!("no password for a role that needs one: {other:?}"),
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
    // A read-write lock's draw that finds its sequence behind the clock
    // (set back here) sets it to the clock, which takes UPDATE on it: the
    // floor runs as the schema's owner.
    server.sql("SELECT setval('recipes.rw_order', 1)");
    let rw = user.rw_lock(&format!("{lock}-rw")).unwrap();
    let w = rw.write().unwrap();
    assert!(w.token().get() > 1_000_000, "{}", w.token().get());
    w.release().unwrap();
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

/// A statement that failed aborts the transaction at the server even when
/// the closure ignores its error and returns `Ok`: PostgreSQL then rolls
/// back at the `COMMIT` (and says so only in the command's tag), so the
/// call must fail, not report a commit. A failure recovered with a
/// savepoint commits the rest.
#[test]
fn a_fenced_transaction_whose_statement_failed_never_reports_a_commit() {
    let server = PgServer::shared();
    let t = table(server, "tx_aborted");
    let c = connect(&server.url(), TTL).unwrap();
    let held = c.mutex(&name("tx-aborted")).unwrap().lock().unwrap();
    let fence = held.token().get() as i64;
    let insert = format!("INSERT INTO {t} (fence) VALUES ($1)");
    let ignored = held.transaction(|tx| {
        tx.execute(&insert, &[(&fence, Type::INT8)])?;
        let failed = tx.execute("INSERT INTO recipes_no_such_table VALUES (1)", &[]);
        assert!(failed.is_err(), "{failed:?}");
        Ok(())
    });
    match &ignored {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains("nothing was committed"), "{message}")
        }
        other => panic!("an aborted transaction reported {other:?}"),
    }
    assert!(fences(server, &t).is_empty(), "nothing committed");
    held.transaction(|tx| {
        tx.execute(&insert, &[(&fence, Type::INT8)])?;
        tx.batch_execute("SAVEPOINT s")?;
        let failed = tx.execute("INSERT INTO recipes_no_such_table VALUES (1)", &[]);
        assert!(failed.is_err(), "{failed:?}");
        tx.batch_execute("ROLLBACK TO SAVEPOINT s")
    })
    .expect("a transaction recovered by its savepoint commits");
    assert_eq!(fences(server, &t), vec![fence.to_string()]);
    held.release().unwrap();
    c.close().unwrap();
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

/// A permit's waiter is let in by any holder's release, not only by the
/// holder `n` places ahead of it (which the queue's rule names): with
/// polling out of the way (every 120 s, TTL 120 s), the waiter of a
/// two-permit semaphore gets the permit the second holder gives back
/// while the first still holds, within the bound only through its
/// notification.
#[test]
fn a_permit_waiter_is_let_in_by_any_holders_release() {
    let server = PgServer::shared();
    let facts = PgFacts::new(server.addr());
    let sem = name("any-release");
    let deaf = || deaf(&server.url(), Duration::from_secs(120));
    let (a, b, c) = (deaf(), deaf(), deaf());
    let first = a.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let second = b.semaphore(&sem, 2).unwrap().acquire().unwrap();
    let waiter = {
        let s = c.semaphore(&sem, 2).unwrap();
        std::thread::spawn(move || s.acquire().unwrap())
    };
    let leases = format!("{sem}/leases/");
    let bound = scale(Duration::from_secs(10));
    integration::wait_until("c waits for a permit", bound, || {
        let entries = facts.entries_under(&sem);
        entries.iter().filter(|e| e.starts_with(&leases)).count() == 3
    });
    second.release().unwrap();
    integration::wait_until("c hears the second permit released", bound, || {
        waiter.is_finished()
    });
    let third = waiter.join().unwrap();
    assert!(!first.is_lost() && !third.is_lost());
    third.release().unwrap();
    first.release().unwrap();
    for client in [a, b, c] {
        client.close().unwrap();
    }
    assert!(facts.entries_under(&sem).is_empty());
}

/// A client that went through more names than it keeps listening to
/// unlistens the idle ones, never a name that a waiter or a holder of its
/// still listens on. Polling is out of the way (every 120 s, TTL 120 s):
/// each waiter acquires, and the holder hears its row deleted, within the
/// bound only through their notifications.
#[test]
fn a_client_that_used_many_names_still_hears_the_names_it_waits_on_and_holds() {
    let server = PgServer::shared();
    let facts = PgFacts::new(server.addr());
    let base = name("many-names");
    let (waited, held_name) = (format!("{base}/waited"), format!("{base}/held"));
    let deaf = || deaf(&server.url(), Duration::from_secs(120));
    let (a, b) = (deaf(), deaf());
    let bound = scale(Duration::from_secs(10));
    let queued = |n: &str| b.contenders(n).unwrap().len() == 2;
    let blocking = b.mutex(&waited).unwrap().lock().unwrap();
    let held = a.mutex(&held_name).unwrap().lock().unwrap();
    let waiter = {
        let mutex = a.mutex(&waited).unwrap();
        std::thread::spawn(move || mutex.lock().unwrap())
    };
    integration::wait_until("a waits behind b", bound, || queued(&waited));
    // A wait listens on its name's channel: more than twice the channels a
    // client keeps before it unlistens idle ones, each handed from b to a.
    for i in 0..300 {
        let n = format!("{base}/{i}");
        let g = b.mutex(&n).unwrap().lock().unwrap();
        let next = {
            let mutex = a.mutex(&n).unwrap();
            std::thread::spawn(move || mutex.lock().unwrap())
        };
        integration::wait_until(&format!("a waits for {n}"), bound, || queued(&n));
        g.release().unwrap();
        integration::wait_until(&format!("a hears {n} released"), bound, || {
            next.is_finished()
        });
        next.join().unwrap().release().unwrap();
    }
    blocking.release().unwrap();
    integration::wait_until("the first waiter hears b's release", bound, || {
        waiter.is_finished()
    });
    waiter.join().unwrap().release().unwrap();
    facts.delete(held.holder());
    assert!(
        held.lost().wait_timeout(bound).is_some(),
        "the holder did not hear its row deleted"
    );
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
    assert!(facts.entries_under(&waited).is_empty());
    assert!(facts.entries_under(&held_name).is_empty());
}

/// A held row deleted with no notification (the queue's trigger off) is
/// seen by the client's one poll of the rows it holds, within its
/// interval, and only that guard is lost.
#[test]
fn a_held_row_deleted_unheard_is_lost_at_the_clients_poll() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let c = PgClient::builder(server.url())
        .ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(200))
        .connect()
        .unwrap();
    let base = name("unheard");
    let held: Vec<_> = (0..20)
        .map(|i| c.mutex(&format!("{base}/{i}")).unwrap().lock().unwrap())
        .collect();
    server.sql("ALTER TABLE recipes.queue DISABLE TRIGGER queue_notify");
    facts.delete(held[3].holder());
    server.sql("ALTER TABLE recipes.queue ENABLE TRIGGER queue_notify");
    // The poll runs every TTL/3 (1 s) here.
    assert!(
        held[3]
            .lost()
            .wait_timeout(scale(Duration::from_secs(5)))
            .is_some(),
        "the unheard deletion was not seen"
    );
    assert!(held.iter().enumerate().all(|(i, g)| i == 3 || !g.is_lost()));
    for g in held {
        let _ = g.release();
    }
    c.close().unwrap();
    assert!(facts.entries_under(&format!("{base}/3")).is_empty());
}
