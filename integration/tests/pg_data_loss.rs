//! PostgreSQL losing its data under a held lock (issue 23): the schema
//! `recipes` dropped, its tables truncated. The holder loses its lock at
//! its next renewal or poll, its fenced transaction is refused, the next
//! fence is above every earlier one (the database clock floors it), and a
//! client whose schema vanished creates it again and goes on. Each test
//! has its own server (`fault` in the name: they run one at a time).

mod pg_common;

use std::time::Duration;

use integration::{scale, PgServer};
use pg_common::*;
use recipes_core::{Client, Error};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, MutexGuard, PgClient};

/// A client of `server` in lease mode, or in session mode, whose renewals
/// and polls come every third of a second.
fn client(server: &PgServer, session: bool) -> PgClient {
    let b = PgClient::builder(server.url())
        .ttl(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(2));
    let b = if session { b.session_mode() } else { b };
    b.connect().unwrap()
}

/// Take `lock` on `c` and write the fence into `table` in a fenced
/// transaction; the guard and its fence.
fn hold_and_write(c: &PgClient, lock: &str, table: &str) -> (MutexGuard, u64) {
    let g = c.mutex(lock).unwrap().lock().unwrap();
    let fence = g.token().get();
    write(&g, table).expect("the holder's fenced transaction commits");
    (g, fence)
}

fn write(g: &MutexGuard, table: &str) -> recipes_core::Result<u64> {
    let fence = g.token().get() as i64;
    g.transaction(|tx| {
        tx.execute(
            &format!("INSERT INTO {table} (fence) VALUES ($1)"),
            &[(&fence, Type::INT8)],
        )
    })
}

/// After the data under `held` (fence `last`, the highest so far) was lost
/// by `loss`: its fenced transaction is refused, it loses its lock within
/// a bound of a few renewals, and `c` (the same client) takes the lock
/// again with a fence above `last`. The new guard.
fn lost_and_taken_again(
    server: &PgServer,
    c: &PgClient,
    held: MutexGuard,
    lock: &str,
    table: &str,
    last: u64,
    loss: &str,
) -> (MutexGuard, u64) {
    server.sql(loss);
    // Refused at once, whether the loss has fired yet or not.
    let refused = write(&held, table).expect_err("the lost holder's transaction is refused");
    assert!(
        matches!(refused, Error::FenceRejected { .. }),
        "{loss}: {refused}"
    );
    assert!(
        held.lost()
            .wait_timeout(scale(Duration::from_secs(3)))
            .is_some(),
        "{loss}: the holder did not lose its lock"
    );
    assert!(held.check().is_err(), "{loss}");
    drop(held);
    let (g, fence) = hold_and_write(c, lock, table);
    assert!(fence > last, "{loss}: fence {fence} after {last}");
    (g, fence)
}

/// The fences `table` holds, in the order written.
fn written(server: &PgServer, table: &str) -> Vec<u64> {
    let out = server.sql(&format!("SELECT fence FROM {table} ORDER BY ctid"));
    out.lines().map(|l| l.parse().unwrap()).collect()
}

fn strictly_increasing(fences: &[u64]) -> bool {
    fences.windows(2).all(|w| w[0] < w[1])
}

/// `mode`'s holder across a dropped schema: it loses, the same client
/// creates the schema again and goes on above every earlier fence, and so
/// does a new client.
fn schema_dropped(session: bool) {
    let server = PgServer::start();
    let t = table(&server, "dropped");
    let lock = name("dropped");
    let (a, b) = (client(&server, session), client(&server, session));
    for _ in 0..3 {
        let (g, _) = hold_and_write(&a, &lock, &t);
        g.release().unwrap();
    }
    let (held, fence) = hold_and_write(&a, &lock, &t);
    let drop = "DROP SCHEMA recipes CASCADE";
    let (again, fence) = lost_and_taken_again(&server, &a, held, &lock, &t, fence, drop);
    again.release().unwrap();
    let (next, _) = hold_and_write(&b, &lock, &t);
    next.release().unwrap();
    let fences = written(&server, &t);
    assert_eq!(fences.len(), 6);
    assert!(strictly_increasing(&fences), "{fences:?} after {fence}");
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn fault_lease_mode_schema_dropped_under_a_holder_loses_it_and_fences_go_on() {
    schema_dropped(false);
}

#[test]
fn fault_session_mode_schema_dropped_under_a_holder_loses_it_and_fences_go_on() {
    schema_dropped(true);
}

/// Every truncation that takes the holder's rows, one after another on one
/// lock: each loses the holder, and fences only go up.
fn truncated(session: bool, losses: &[&str]) {
    let server = PgServer::start();
    let t = table(&server, "truncated");
    let lock = name("truncated");
    let a = client(&server, session);
    let (mut held, mut fence) = hold_and_write(&a, &lock, &t);
    for loss in losses {
        (held, fence) = lost_and_taken_again(&server, &a, held, &lock, &t, fence, loss);
    }
    held.release().unwrap();
    let fences = written(&server, &t);
    assert_eq!(fences.len(), losses.len() + 1);
    assert!(strictly_increasing(&fences), "{fences:?}");
    a.close().unwrap();
}

#[test]
fn fault_lease_mode_tables_truncated_under_a_holder_lose_it_and_fences_go_on() {
    truncated(
        false,
        &[
            "TRUNCATE recipes.names, recipes.queue, recipes.sessions CASCADE",
            "TRUNCATE recipes.queue",
            "TRUNCATE recipes.sessions CASCADE",
            "TRUNCATE recipes.names CASCADE",
        ],
    );
}

/// Session mode keeps its lock in `pg_locks`, not in a table: what a
/// truncation takes is the fence row.
#[test]
fn fault_session_mode_tables_truncated_under_a_holder_lose_it_and_fences_go_on() {
    truncated(
        true,
        &[
            "TRUNCATE recipes.names, recipes.queue, recipes.sessions CASCADE",
            "TRUNCATE recipes.names CASCADE",
        ],
    );
}

/// A schema that lost one of its tables (dropped by hand) cannot be
/// created again over: the error says to drop it whole, and is not
/// retried for ever.
#[test]
fn fault_a_schema_missing_one_table_is_a_terminal_error_that_says_what_to_do() {
    let server = PgServer::start();
    let a = client(&server, false);
    server.sql("DROP TABLE recipes.queue");
    let lock = name("damaged");
    let took = a
        .mutex(&lock)
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(5)));
    let e = took.expect_err("a damaged schema is refused");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("DROP SCHEMA recipes CASCADE"), "{e}");
    a.close().unwrap();
}

/// An older backup restored leaves the name's counter behind the fences
/// issued since (here: set back to where a backup taken before them had
/// it): the next fence is still above every earlier one, in both modes.
#[test]
fn fault_an_older_backup_restored_leaves_fences_above_every_earlier_one() {
    let server = PgServer::start();
    let t = table(&server, "restored");
    for session in [false, true] {
        let lock = name("restored");
        let a = client(&server, session);
        let (g, first) = hold_and_write(&a, &lock, &t);
        g.release().unwrap();
        for _ in 0..3 {
            let (g, _) = hold_and_write(&a, &lock, &t);
            g.release().unwrap();
        }
        let sql = format!("UPDATE recipes.names SET fence = {first} WHERE name = '{lock}'");
        server.sql(&sql);
        let (g, _) = hold_and_write(&a, &lock, &t);
        g.release().unwrap();
        a.close().unwrap();
    }
    let fences = written(&server, &t);
    assert_eq!(fences.len(), 10);
    assert!(strictly_increasing(&fences), "{fences:?}");
}

/// Session mode: a permit's fenced write after the schema was dropped is
/// refused at once, as a lock's is. (Its check read no table before: the
/// write made the schema again and landed in the new one.)
#[test]
fn fault_session_mode_schema_dropped_refuses_a_permits_fenced_write() {
    let server = PgServer::start();
    let c = client(&server, true);
    let sem = c.semaphore("/data-loss/permits", 2).unwrap();
    let permit = sem.acquire().unwrap();
    permit
        .put("/data-loss/permits-resource", b"before")
        .expect("the permit writes while it holds");
    server.sql("DROP SCHEMA recipes CASCADE");
    let refused = permit.put("/data-loss/permits-resource", b"after");
    assert!(
        matches!(refused, Err(Error::FenceRejected { .. })),
        "{refused:?}"
    );
    let kv = server.sql(
        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'recipes' AND tablename = 'kv'",
    );
    if kv.trim() == "1" {
        assert_eq!(server.sql("SELECT count(*) FROM recipes.kv").trim(), "0");
    }
    drop(permit);
    c.close().unwrap();
}

/// A waiter whose entry was truncated away, whose seq a later entry drew
/// again (the name's row made anew: `next_seq` starts over), never takes
/// that entry for its own: when the entry ahead of it goes, the waiter
/// queues again, behind the entry at its old seq. (When a look judged
/// ours by seq alone, the waiter held on that entry, beside its owner.)
/// The later entries are written by hand, in one transaction, as two
/// clients would have entered before the waiter looked again; polling is
/// out of the way (every 30 s).
#[test]
fn fault_lease_mode_a_waiter_never_holds_anothers_entry_at_its_seq_after_a_truncate() {
    let server = PgServer::start();
    let deaf = || deaf(&server.url(), Duration::from_secs(30));
    let (a, w) = (deaf(), deaf());
    let lock = "/data-loss/seq-again";
    let facts = integration::PgFacts::new(server.addr());
    let bound = scale(Duration::from_secs(10));
    let queued = |n: usize| facts.entries_under(lock).len() == n;
    let first = a.mutex(lock).unwrap().lock().unwrap();
    let waiter = {
        let m = w.mutex(lock).unwrap();
        std::thread::spawn(move || m.lock().unwrap())
    };
    integration::wait_until("w waits at seq 1", bound, || queued(2));
    server.sql("TRUNCATE recipes.names CASCADE");
    // Two entries of a live session of someone else's, at seqs 0 and 1.
    server.sql(&format!(
        "BEGIN; \
         INSERT INTO recipes.sessions (ttl, expires_at) \
           VALUES (interval '60 s', clock_timestamp() + interval '60 s'); \
         INSERT INTO recipes.names (name, kind, next_seq) VALUES ('{lock}', 'lock', 1); \
         INSERT INTO recipes.queue (name, seq, entry, session) \
           SELECT '{lock}', s, gen_random_uuid(), currval(pg_get_serial_sequence('recipes.sessions', 'id')) \
           FROM generate_series(0, 1) AS s; \
         COMMIT"
    ));
    // The waiter may hear the entry at seq 0 come and queue again
    // already: then the entries are 0, 1 and the waiter's new one.
    server.sql(&format!(
        "DELETE FROM recipes.queue WHERE name = '{lock}' AND seq = 0"
    ));
    // Before the waiter is in again, the entry at seq 1 is alone.
    integration::wait_until("w holds, or queued again", bound, || {
        waiter.is_finished() || queued(2)
    });
    assert!(
        !waiter.is_finished(),
        "w holds on another's entry at its old seq"
    );
    server.sql(&format!(
        "DELETE FROM recipes.queue WHERE name = '{lock}' AND seq = 1"
    ));
    integration::wait_until("w holds", bound, || waiter.is_finished());
    waiter.join().unwrap().release().unwrap();
    drop(first);
    for c in [a, w] {
        c.close().unwrap();
    }
}

/// The database clock in µs since the Unix epoch, as the tokens use it.
fn clock_us(server: &PgServer) -> i64 {
    let now = server.sql("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8");
    now.trim().parse().unwrap()
}

/// An older backup restored sets `recipes.rw_order` back to where it
/// stood at the dump (here: `setval` to the value read then, more than
/// the floor's 10 ms later): the read-write lock's next tokens, of a
/// writer and of a reader, are still above every one issued before, in
/// both modes. (They repeated those issued since the dump before the
/// sequence was floored by the clock.)
#[test]
fn fault_an_older_backup_restored_leaves_read_write_tokens_above_every_earlier_one() {
    let server = PgServer::start();
    for session in [false, true] {
        let c = client(&server, session);
        let rw = c.rw_lock(&name("rw-restored")).unwrap();
        rw.read().unwrap().release().unwrap();
        let dumped: i64 = server
            .sql("SELECT last_value FROM recipes.rw_order")
            .trim()
            .parse()
            .unwrap();
        let mut earlier = Vec::new();
        for _ in 0..3 {
            let w = rw.write().unwrap();
            earlier.push(w.token().get());
            w.release().unwrap();
            let r = rw.read().unwrap();
            earlier.push(r.token().get());
            r.release().unwrap();
        }
        let last = *earlier.iter().max().unwrap();
        integration::wait_until(
            "the dump is over 20 ms old",
            scale(Duration::from_secs(5)),
            || clock_us(&server) > dumped + 20_000,
        );
        server.sql(&format!("SELECT setval('recipes.rw_order', {dumped})"));
        let w = rw.write().unwrap();
        let written = w.token().get();
        w.release().unwrap();
        let r = rw.read().unwrap();
        let read = r.token().get();
        r.release().unwrap();
        assert!(
            written > last && read > written,
            "session mode {session}: write {written}, read {read} after {earlier:?}"
        );
        c.close().unwrap();
    }
}

/// The ids of `recipes.sessions`, lowest first.
fn session_ids(server: &PgServer) -> Vec<i64> {
    let ids = server.sql("SELECT id FROM recipes.sessions ORDER BY id");
    ids.lines().map(|l| l.trim().parse().unwrap()).collect()
}

/// An older backup restored, taken before a client opened its session:
/// the client's row is gone, and the ids' sequence is set back to where
/// it stood at the dump. A session opened next takes an id above every
/// one issued before (it took the gone session's id, which its client
/// then renewed as its own, never losing the locks the restore took),
/// and the client whose row went loses its lock.
#[test]
fn fault_an_older_backup_restored_gives_no_new_session_an_earlier_id() {
    let server = PgServer::start();
    let lock = name("session-restored");
    let a = client(&server, false);
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let ids = session_ids(&server);
    let &[id] = &ids[..] else {
        panic!("one session expected: {ids:?}")
    };
    server.sql(&format!(
        "BEGIN; DELETE FROM recipes.sessions WHERE id = {id}; \
         SELECT setval(pg_get_serial_sequence('recipes.sessions', 'id'), {id} - 1); COMMIT"
    ));
    let b = client(&server, false);
    let taken = b.mutex(&lock).unwrap().lock().unwrap();
    let after = session_ids(&server);
    assert!(
        after.iter().all(|&new| new > id),
        "a new session took an id issued before: {after:?} after {id}"
    );
    assert!(
        held.lost()
            .wait_timeout(scale(Duration::from_secs(3)))
            .is_some(),
        "the client whose session row went did not lose its lock"
    );
    taken.release().unwrap();
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
}

/// A holder whose session row went (its loss fired), then came back with
/// its entry — an older backup restored, taken while it held — is refused
/// every fenced write: its client knows the lock was lost, though the
/// store's check (the name's fence still its own, its entry and session
/// live) would let the write land after the next holder's.
#[test]
fn fault_a_lost_holder_is_refused_after_its_rows_come_back() {
    let server = PgServer::start();
    let t = table(&server, "revived");
    let lock = name("revived");
    let a = client(&server, false);
    let (held, _) = hold_and_write(&a, &lock, &t);
    let ids = session_ids(&server);
    let &[id] = &ids[..] else {
        panic!("one session expected: {ids:?}")
    };
    server.sql(&format!(
        "CREATE TABLE saved_q AS SELECT name, seq, entry, session, value, role \
           FROM recipes.queue WHERE session = {id}; \
         DELETE FROM recipes.sessions WHERE id = {id}"
    ));
    assert!(
        held.lost()
            .wait_timeout(scale(Duration::from_secs(3)))
            .is_some(),
        "the holder whose session row went did not lose its lock"
    );
    server.sql(&format!(
        "INSERT INTO recipes.sessions (id, ttl, expires_at) OVERRIDING SYSTEM VALUE \
           VALUES ({id}, interval '60 s', clock_timestamp() + interval '60 s'); \
         INSERT INTO recipes.queue (name, seq, entry, session, value, role) \
           SELECT * FROM saved_q"
    ));
    let refused = write(&held, &t);
    assert!(
        matches!(refused, Err(Error::FenceRejected { .. })),
        "a lost holder's transaction: {refused:?}"
    );
    let put = held.put(&format!("{lock}-resource"), b"late");
    assert!(
        matches!(put, Err(Error::FenceRejected { .. })),
        "a lost holder's put: {put:?}"
    );
    assert_eq!(
        written(&server, &t).len(),
        1,
        "only the write made while held"
    );
    drop(held);
    a.close().unwrap();
}

/// A holder whose row is still there but whose name's fence is no longer
/// its own — the name's row went back with an older backup restored, to
/// before its confirm — loses its lock at its next poll: it cannot write
/// (its fenced writes check the fence), and it must not go on believing it
/// holds. (Only a missing row was a loss: it held, silently refused, until
/// its first write.)
#[test]
fn fault_lease_mode_a_holder_whose_names_fence_went_back_loses_it() {
    let server = PgServer::start();
    let lock = name("fence-back");
    let a = client(&server, false);
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let fence = held.token().get();
    server.sql(&format!(
        "UPDATE recipes.names SET fence = {} WHERE name = '{lock}'",
        fence - 1
    ));
    assert!(
        held.lost()
            .wait_timeout(scale(Duration::from_secs(3)))
            .is_some(),
        "the holder whose name's fence went back did not lose its lock"
    );
    drop(held);
    let again = a.mutex(&lock).unwrap().lock().unwrap();
    assert!(again.token().get() > fence);
    again.release().unwrap();
    a.close().unwrap();
}
