//! Session mode (advisory locks on connections of their own) on
//! PostgreSQL: its faults — a terminated backend, a server restart, a
//! paused holder — the refusal behind a transaction-mode pooler, bad
//! input, and the transaction-scoped lock. Tests whose names contain
//! `fault` have their own server and run one at a time.

mod pg_common;

use std::time::{Duration, Instant};

use integration::test_dir::TestDir;
use integration::{scale, wait_until, PgBouncer, PgFacts, PgServer, PoolMode};
use pg_common::*;
use recipes_core::{BootInstant, Client, Error, LossReason};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, PgClient, PgMode};

/// Two session-mode clients of `server`: one holds `lock`, the other waits
/// for it (see [`waiter`]) and is queued at the server.
struct HolderAndWaiter {
    clients: [PgClient; 2],
    held: recipes_pg::MutexGuard,
    taken: crossbeam_channel::Receiver<Taken>,
    facts: PgFacts,
}

impl HolderAndWaiter {
    fn start(server: &PgServer, lock: &str) -> HolderAndWaiter {
        let facts = PgFacts::new(server.addr());
        let clients = [
            session(&server.url(), TTL).unwrap(),
            session(&server.url(), TTL).unwrap(),
        ];
        let held = clients[0].mutex(lock).unwrap().lock().unwrap();
        let taken = waiter(&clients[1], lock, held.lost().clone());
        wait_until("the waiter waits", scale(Duration::from_secs(10)), || {
            facts.advisory(lock, false).len() == 1
        });
        HolderAndWaiter {
            clients,
            held,
            taken,
            facts,
        }
    }

    /// The waiter's report once it holds: its fence, after asserting that
    /// the holder's loss fired first and its deadline had passed (the
    /// server freed the key at once; the waiter waited out the holder's
    /// last heartbeat + TTL).
    fn taken_after_the_holders_loss(&self, within: Duration) -> recipes_core::FencingToken {
        let (lost_first, token, taken_at) = self
            .taken
            .recv_timeout(scale(within))
            .expect("the waiter acquires");
        assert!(lost_first, "the holder's loss fired before the waiter held");
        let valid_until = self.held.valid_until().expect("a deadline");
        assert!(
            valid_until <= taken_at,
            "the holder was valid until {valid_until:?}, the waiter held at {taken_at:?}"
        );
        assert!(
            token > self.held.token(),
            "{token} after {}",
            self.held.token()
        );
        token
    }

    /// The old holder's fenced put is refused.
    fn old_put_is_refused(&self, lock: &str) {
        match self.held.put(&format!("{lock}-resource"), b"late") {
            Err(Error::FenceRejected { .. }) => {}
            other => panic!("the old holder's fenced put: {other:?}"),
        }
    }

    fn close(self) {
        drop(self.taken);
        drop(self.held);
        for c in self.clients {
            c.close().ok();
        }
    }
}

/// What a waiter saw the moment it held: whether the holder's loss had
/// fired, its fence, when.
type Taken = (bool, recipes_core::FencingToken, BootInstant);

/// A waiter on `lock` (its own client) that reports, the moment it holds,
/// whether `holder_lost` had fired by then, its fence and the time.
fn waiter(
    client: &PgClient,
    lock: &str,
    holder_lost: recipes_core::LossSignal,
) -> crossbeam_channel::Receiver<Taken> {
    let m = client.mutex(lock).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let g = m.lock().expect("the waiter acquires");
        tx.send((holder_lost.is_lost(), g.token(), BootInstant::now()))
            .unwrap();
        // Held until the test drops the receiver's end.
        let _ = tx.send((false, g.token(), BootInstant::now()));
        g.release().unwrap();
    });
    rx
}

fn invalid<T: std::fmt::Debug>(what: &str, r: recipes_core::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(message)) => message,
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// `pg_terminate_backend` of the holder's backend: its loss fires (as a
/// deletion) before the waiter holds, the waiter's fence is higher, and
/// the old holder's fenced writes are refused.
#[test]
fn fault_session_a_terminated_backend_loses_before_anyone_else_holds() {
    let server = PgServer::start();
    let lock = name("session-terminated");
    let h = HolderAndWaiter::start(&server, &lock);
    h.facts.terminate(h.held.holder());
    h.taken_after_the_holders_loss(Duration::from_secs(10));
    assert_eq!(h.held.lost().reason(), Some(LossReason::Deleted));
    h.old_put_is_refused(&lock);
    match h.held.transaction(|tx| tx.batch_execute("SELECT 1")) {
        Err(Error::FenceRejected { .. }) => {}
        other => panic!("the terminated holder's fenced transaction: {other:?}"),
    }
    h.close();
}

/// A server restart ends every backend: the holder loses before the
/// waiter holds, and the waiter acquires after the restart with a higher
/// fence.
#[test]
fn fault_session_a_server_restart_loses_the_holder_and_the_waiter_acquires_after_it() {
    let server = PgServer::start();
    let lock = name("session-restart");
    let h = HolderAndWaiter::start(&server, &lock);
    server.restart();
    h.taken_after_the_holders_loss(Duration::from_secs(30));
    h.old_put_is_refused(&lock);
    h.close();
}

/// After an unclean end (the holder's backend terminated) a try-lock is
/// cut off while it waits out the old holder's deadline; those cut-off
/// tries never push the wait further out: a try succeeds once that
/// deadline has passed.
#[test]
fn fault_session_tries_after_an_unclean_end_do_not_push_the_wait_out() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let a = session(&server.url(), TTL).unwrap();
    let b = PgClient::builder(server.url())
        .ttl(TTL)
        .rpc_timeout(Duration::from_millis(300))
        .session_mode()
        .connect()
        .unwrap();
    let lock = name("session-tries");
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    facts.terminate(held.holder());
    let m = b.mutex(&lock).unwrap();
    let next = integration::wait_for(
        "a try-lock succeeds",
        scale(TTL + Duration::from_secs(10)),
        || m.try_lock().unwrap(),
    );
    let (taken_at, valid_until) = (BootInstant::now(), held.valid_until().unwrap());
    assert!(
        valid_until <= taken_at,
        "taken before the old holder's deadline"
    );
    assert!(
        taken_at <= valid_until + scale(Duration::from_secs(2)),
        "taken {:?} after the old holder's deadline",
        taken_at - valid_until
    );
    assert!(held.lost().is_lost());
    assert!(next.token() > held.token());
    next.release().unwrap();
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
}

/// A holder paused (SIGSTOP) keeps its TCP connection open; the server
/// ends its session `idle_session_timeout` (the TTL) after its last
/// heartbeat, so the lock is free within the TTL; the next holder's
/// fenced transaction commits and the old one's, after it resumed, is
/// refused.
#[test]
fn fault_session_a_paused_holder_is_freed_within_its_ttl_and_fenced_out() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let t = table(&server, "session_paused");
    let lock = name("session-paused");
    let dir = TestDir::new("pg-session-paused");
    let start = format!("connect pg-session {} {}", server.url(), TTL.as_millis());
    let (mut old, old_token, old_holder) = worker_holding(&dir, &start, &lock, &t);
    let status = old.ok("status", Duration::from_secs(5));
    // The holder's local deadline (its last acknowledged heartbeat's send
    // time + the TTL − a margin); later heartbeats only move it on.
    let valid_until = BootInstant::from_since_boot(Duration::from_millis(
        field(&status, "valid_until_ms=").parse().unwrap(),
    ));
    old.pause();
    let paused_at = BootInstant::now();
    wait_until(
        "the server ends the paused holder's session",
        scale(TTL + Duration::from_secs(10)),
        || !facts.advisory_held(&old_holder),
    );
    let freed_at = BootInstant::now();
    // Never before the holder's deadline (unscaled: the server counts the
    // TTL from the last heartbeat it ran, after its send); within the TTL
    // of the pause, plus slack.
    assert!(
        freed_at >= valid_until,
        "freed {:?} before the holder's deadline",
        valid_until - freed_at
    );
    assert!(
        freed_at <= paused_at + TTL + scale(Duration::from_secs(2)),
        "freed {:?} after the pause",
        freed_at - paused_at
    );
    let c = session(&server.url(), Duration::from_secs(10)).unwrap();
    the_next_holder_commits_and_the_paused_one_is_refused(
        &server, &c, &lock, &t, &mut old, &old_token,
    );
    c.close().unwrap();
}

/// Behind pgbouncer in transaction mode session mode is refused at
/// connect, naming the fix, and leaves nothing; lease mode through the
/// same pooler connects; session mode through a session-mode pool works.
#[test]
fn session_mode_behind_a_transaction_pooler_is_refused() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let pooled = PgBouncer::start(&server, PoolMode::Transaction);
    let message = invalid(
        "session mode through pool_mode = transaction",
        session(&pooled.url(), TTL),
    );
    for fix in ["transaction-mode pooler", "lease mode", "session-mode pool"] {
        assert!(message.contains(fix), "{message}");
    }
    // Plain words, not the backend PIDs it saw.
    assert!(!message.contains("backends"), "{message}");
    let lease = connect(&pooled.url(), TTL).expect("lease mode through the pooler");
    lease.close().unwrap();

    let pool = PgBouncer::start(&server, PoolMode::Session);
    let c = session(&pool.url(), TTL).expect("session mode through a session pool");
    let lock = name("session-pooled");
    let g = c.mutex(&lock).unwrap().lock().unwrap();
    assert!(facts.advisory_held(g.holder()));
    g.release().unwrap();
    c.close().unwrap();
    assert!(
        facts.advisory_all().is_empty(),
        "{:?}",
        facts.advisory_all()
    );
    assert!(facts.sql("SELECT count(*) FROM recipes.queue").trim() == "0");
}

/// Bad input in session mode is a typed error saying what to change,
/// within the RPC timeout, and leaves no lock and no row behind.
#[test]
fn session_bad_input_is_a_typed_error_and_leaves_nothing() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let url = server.url();
    let started = Instant::now();
    let m = invalid(
        "the namespace 0",
        PgClient::builder(&url)
            .session_mode()
            .advisory_namespace(0)
            .connect(),
    );
    assert!(m.contains("namespace"), "{m}");
    let m = invalid("the mode sesion", "sesion".parse::<PgMode>());
    assert!(m.contains("lease") && m.contains("session"), "{m}");

    let c = session(&url, TTL).unwrap();
    let long = format!("/{}", "x".repeat(2_100));
    invalid(
        "an oversized name",
        c.mutex(&long).and_then(|m| m.try_lock()),
    );
    invalid(
        "an oversized transaction lock name",
        c.with_xact_lock(&long, Some(Duration::ZERO), |_, _| Ok(())),
    );
    invalid("no permits", c.semaphore(&name("session-none"), 0));

    // One name, one mode: the modes' locks do not exclude each other.
    let lease = connect(&url, TTL).unwrap();
    let (by_lease, by_session) = (name("session-mixed-a"), name("session-mixed-b"));
    let g = lease.mutex(&by_lease).unwrap().lock().unwrap();
    let m = invalid(
        "a session-mode lock on a lease-mode name",
        c.mutex(&by_lease).and_then(|m| m.try_lock()),
    );
    assert!(
        m.contains("lease-mode") && m.contains("--pg-mode lease"),
        "{m}"
    );
    // Refused before its key was taken: nothing to give back, and the
    // retry at once gets the same answer.
    assert!(facts.advisory(&by_lease, true).is_empty());
    g.release().unwrap();
    // Used before, held by nobody now: the same answer.
    let m = invalid(
        "a session-mode lock on a name used in lease mode",
        c.mutex(&by_lease).and_then(|m| m.try_lock()),
    );
    assert!(m.contains("--pg-mode lease"), "{m}");
    let s = c.mutex(&by_session).unwrap().lock().unwrap();
    let m = invalid(
        "a lease-mode lock on a session-mode name",
        lease.mutex(&by_session).and_then(|m| m.try_lock()),
    );
    assert!(
        m.contains("session-mode") && m.contains("--pg-mode session"),
        "{m}"
    );
    s.release().unwrap();
    let m = invalid(
        "a lease-mode lock on a name used in session mode",
        lease.mutex(&by_session).and_then(|m| m.try_lock()),
    );
    assert!(m.contains("--pg-mode session"), "{m}");
    let sem = name("session-sem");
    let permit = c.semaphore(&sem, 2).unwrap().acquire().unwrap();
    invalid("another size", c.semaphore(&sem, 3));
    permit.release().unwrap();
    assert!(
        started.elapsed() < scale(Duration::from_secs(15)),
        "bad input took {:?}",
        started.elapsed()
    );
    wait_until(
        "no advisory lock is left",
        scale(Duration::from_secs(5)),
        || facts.advisory_all().is_empty(),
    );
    assert_eq!(facts.sql("SELECT count(*) FROM recipes.queue").trim(), "0");
    let names = facts.sql("SELECT name FROM recipes.names ORDER BY name");
    assert!(!names.contains(&long), "the oversized name left a row");
    lease.close().unwrap();
    c.close().unwrap();
    assert!(facts.advisory_all().is_empty());
}

/// The transaction-scoped lock is the session-mode mutex's key and fence:
/// each excludes the other, fences increase across both, a timed wait
/// ends within its bound, and a failed closure rolls back and unlocks.
#[test]
fn a_transaction_lock_excludes_the_session_lock_and_shares_its_fence() {
    let server = PgServer::shared();
    let t = table(server, "xact");
    let (a, b) = (
        session(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let lock = name("xact");
    let insert = format!("INSERT INTO {t} (fence) VALUES ($1)");
    let g = a.mutex(&lock).unwrap().lock().unwrap();
    let none = b.with_xact_lock(&lock, Some(Duration::ZERO), |_, _| Ok(()));
    assert!(none.unwrap().is_none(), "held in session mode");
    let started = Instant::now();
    let none = b.with_xact_lock(&lock, Some(Duration::from_millis(700)), |_, _| Ok(()));
    assert!(none.unwrap().is_none());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(
        took < Duration::from_millis(700) + scale(Duration::from_secs(1)),
        "{took:?}"
    );
    let first = g.token();
    g.release().unwrap();

    let (fence, seven) = b
        .with_xact_lock(&lock, Some(Duration::from_secs(5)), |tx, fence| {
            let f = fence.get() as i64;
            tx.execute(&insert, &[(&f, Type::INT8)])?;
            let m = a.mutex(&lock)?;
            assert!(
                m.try_lock()?.is_none(),
                "the session lock waits for the transaction"
            );
            Ok(7)
        })
        .unwrap()
        .expect("free");
    assert_eq!(seven, 7);
    assert!(fence > first);
    assert_eq!(fences(server, &t), vec![fence.get().to_string()]);

    let failed = b.with_xact_lock(&lock, None, |tx, fence| {
        let f = fence.get() as i64 + 1_000;
        tx.execute(&insert, &[(&f, Type::INT8)])?;
        Err::<(), _>(Error::invalid("the closure failed"))
    });
    invalid("a failed closure", failed);
    assert_eq!(fences(server, &t).len(), 1, "rolled back");
    let next = a
        .mutex(&lock)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("unlocked");
    assert!(next.token() > fence);
    next.release().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}

/// A client that held eight session-mode locks at once holds the next
/// eight on the same backends: the connections it freed are kept (idle,
/// until the server ends them a TTL later) and used again, so no
/// acquisition opens a connection that an earlier one could have lent.
#[test]
fn session_mode_eight_locks_at_once_reuse_the_connections_of_the_last_eight() {
    let server = PgServer::shared();
    let c = session(&server.url(), Duration::from_secs(10)).unwrap();
    let names: Vec<String> = (0..8).map(|i| name(&format!("reuse-{i}"))).collect();
    let backends = || {
        let held: Vec<_> = names
            .iter()
            .map(|n| c.mutex(n).unwrap().lock().unwrap())
            .collect();
        let mut pids: Vec<String> = held.iter().map(|g| g.holder().to_owned()).collect();
        pids.iter_mut()
            .for_each(|h| *h = h.rsplit('-').next().unwrap().to_owned());
        pids.sort();
        held.into_iter().for_each(|g| g.release().unwrap());
        pids
    };
    let first = backends();
    assert_eq!(backends(), first, "the second eight ran on new backends");
    c.close().unwrap();
}

/// `work` under a transaction lock waits for a row as long as it takes:
/// the lock's own wait is cut in slices (`lock_timeout`), which ended with
/// it. (The slice stayed for the whole transaction: a row held for over
/// half a second failed `work`'s statement.)
#[test]
fn a_transaction_locks_work_waits_for_a_row_past_the_locks_slice() {
    let server = PgServer::shared();
    let rows = format!("xact_rows_{}", std::process::id());
    server.sql(&format!(
        "CREATE TABLE {rows} (id int PRIMARY KEY); INSERT INTO {rows} VALUES (1)"
    ));
    let take_row = format!("SELECT id FROM {rows} WHERE id = 1 FOR UPDATE");
    let (a, b) = (
        connect(&server.url(), TTL).unwrap(),
        connect(&server.url(), TTL).unwrap(),
    );
    let (taken, row_held) = crossbeam_channel::bounded(1);
    let holder = {
        let (lock, take_row) = (name("xact-row-holder"), take_row.clone());
        std::thread::spawn(move || {
            a.with_xact_lock(&lock, None, |tx, _| {
                tx.execute(&take_row, &[])?;
                taken.send(()).unwrap();
                tx.execute("SELECT pg_sleep(1.5)", &[]).map(drop)
            })
        })
    };
    row_held.recv().unwrap();
    let waited = b.with_xact_lock(&name("xact-row-waiter"), None, |tx, _| {
        tx.execute(&take_row, &[]).map(drop)
    });
    assert!(matches!(waited, Ok(Some(_))), "{waited:?}");
    assert!(holder.join().unwrap().unwrap().is_some());
}
