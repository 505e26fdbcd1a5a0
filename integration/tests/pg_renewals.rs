//! A statement that waits at the server must not hold up the session's
//! renewals (lease mode): an enter of a name whose row an open
//! transaction holds in share mode (as a holder's fenced transaction
//! does) waits there until that transaction ends or the RPC timeout
//! breaks its connection. Renewals pipelined behind it on one shared
//! connection were late past the local deadline, and every lock of the
//! client was reported lost (seen: lost about one TTL after the enter
//! began to wait). Each test has its own server and runs one at a time
//! (`fault` in the name).

mod pg_common;

use std::time::Duration;

use integration::{scale, wait_until, PgBouncer, PgFacts, PgServer, PoolMode};
use pg_common::*;
use recipes_core::{BootInstant, Client};

/// The RPC timeout: well above the time watched (two TTLs), so the
/// waiting enter is still waiting while the renewals are watched.
const RPC: Duration = Duration::from_secs(10);

/// How long the renewals are watched while the enter waits.
const WATCHED: Duration = Duration::from_secs(4);

#[test]
fn fault_an_enter_waiting_on_a_row_lock_holds_up_no_renewal() {
    let server = PgServer::start();
    renewals_go_on_while_an_enter_waits(&server, &server.url());
}

/// The same through pgbouncer in transaction mode: the lease connection
/// is one more client connection of the pool, its statements unnamed.
#[test]
fn fault_bouncer_an_enter_waiting_on_a_row_lock_holds_up_no_renewal() {
    let server = PgServer::start();
    let bouncer = PgBouncer::start(&server, PoolMode::Transaction);
    renewals_go_on_while_an_enter_waits(&server, &bouncer.url());
}

/// Client C, connected by `url`, holds X; an open transaction holds Y's
/// row in share mode; C's `try_lock` of Y waits at the server. For two
/// TTLs (well within the RPC timeout) C's session goes on being renewed
/// (locally acknowledged and in the database) and X is not lost; once
/// the transaction ends, the enter goes through and X still holds.
fn renewals_go_on_while_an_enter_waits(server: &PgServer, url: &str) {
    let facts = PgFacts::new(server.addr());
    let (x, y) = (name("renewed-x"), name("renewed-y"));
    let c = with_ttl_and_rpc(url, TTL, RPC);
    let held = c.mutex(&x).unwrap().lock().unwrap();
    let my = c.mutex(&y).unwrap();
    // Y's row exists from now on.
    my.try_lock()
        .unwrap()
        .expect("Y is free")
        .release()
        .unwrap();
    let session = facts.sessions();
    assert_eq!(session.len(), 1, "one session: C's");
    let session = &session[0];

    // The blocker: Y's row in share mode, as a fenced transaction holds it.
    let blocker = share_lock(server, &y);

    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || tx.send(my.try_lock().map(|g| g.map(|g| g.release()))));
    wait_until(
        "C's enter waits on Y's row",
        scale(Duration::from_secs(10)),
        || waits_for_a_lock(&facts),
    );
    let (blocked_at, db_blocked) = (BootInstant::now(), facts.sql("SELECT clock_timestamp()"));

    wait_until(
        "renewals acknowledged two TTLs on, or X lost",
        scale(WATCHED + Duration::from_secs(10)),
        || {
            held.lost().is_lost()
                || c.last_acknowledged()
                    .is_some_and(|t| t > blocked_at + WATCHED)
        },
    );
    assert_eq!(
        held.lost().reason(),
        None,
        "X was lost while C's enter of Y waited ({:?} after it began)",
        BootInstant::now().saturating_duration_since(blocked_at)
    );
    assert!(
        rx.try_recv().is_err(),
        "the enter still waits (else the case did not run)"
    );
    let renewed = facts.sql(&format!(
        "SELECT expires_at > '{}'::timestamptz + interval '{} ms' \
         FROM recipes.sessions WHERE id = {session}",
        db_blocked.trim(),
        WATCHED.as_millis()
    ));
    assert_eq!(renewed.trim(), "t", "C's row renewed in the database");

    commit(&blocker);
    rx.recv_timeout(scale(Duration::from_secs(10)))
        .expect("the enter returns once the transaction ended")
        .expect("the enter")
        .expect("Y is free")
        .expect("Y released");
    held.check().expect("X still held");
    held.release().unwrap();
    c.close().unwrap();
}

/// An enter that waited at the server past the call's timeout, given up
/// by the client and undone while its entry was not there yet, never
/// commits that entry later: the server ends the wait first (the enter's
/// `lock_timeout`, within the RPC timeout). (Before, the enter committed
/// once the blocking transaction ended, under the client's live session:
/// an entry no guard owned, first in the queue, so nobody took the name
/// until that client ended.)
#[test]
fn fault_an_enter_given_up_while_it_waits_leaves_no_entry_behind() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let m = name("given-up");
    let client = |rpc: Duration| with_rpc(&server.url(), rpc);
    let (q, r) = (
        client(Duration::from_secs(1)),
        client(Duration::from_secs(10)),
    );
    // M's row exists from now on.
    r.mutex(&m).unwrap().lock().unwrap().release().unwrap();
    let limit = scale(Duration::from_secs(5));
    let blocker = share_lock(&server, &m);
    // Given up: nothing taken, whether as a timeout or an error.
    let taken = q
        .mutex(&m)
        .unwrap()
        .try_lock_for(Duration::from_secs(2))
        .map(|g| g.is_some());
    assert!(!matches!(taken, Ok(true)), "{taken:?}");
    commit(&blocker);
    let next = r
        .mutex(&m)
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(3)))
        .unwrap();
    assert!(
        next.is_some(),
        "an entry of the given-up enter holds M: {:?}",
        facts.entries_under(&m)
    );
    next.unwrap().release().unwrap();
    wait_until("nothing of M is left", limit, || {
        facts.entries_under(&m).is_empty()
    });
    q.close().unwrap();
    r.close().unwrap();
}

/// A confirm that waits for the name's row (held in share mode, as a
/// holder's fenced transaction holds it) holds no session meanwhile: the
/// waiting client's renewals go on, and it loses nothing it holds. (The
/// confirm locked the sessions of its queue, its own among them, in share
/// mode before it waited: its renewals waited behind it, and the client
/// lost every lock about a TTL later.) The entry ahead is another
/// session's, written by hand, which expires while the row is held.
#[test]
fn fault_a_confirm_waiting_for_the_names_row_holds_up_no_renewal() {
    let server = PgServer::start();
    let facts = PgFacts::new(server.addr());
    let (x, y) = (name("confirm-x"), name("confirm-y"));
    let c = with_ttl_and_rpc(&server.url(), TTL, RPC);
    let held = c.mutex(&x).unwrap().lock().unwrap();
    let ahead = server.sql(
        "INSERT INTO recipes.sessions (ttl, expires_at) \
         VALUES (interval '1 s', clock_timestamp() + interval '1 s') RETURNING id",
    );
    server.sql(&format!(
        "INSERT INTO recipes.names (name, kind, next_seq) VALUES ('{y}', 'lock', 0); \
         INSERT INTO recipes.queue (name, seq, entry, session) \
         VALUES ('{y}', 0, gen_random_uuid(), {})",
        ahead.trim()
    ));
    let my = c.mutex(&y).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let taken = my.try_lock_for(scale(Duration::from_secs(30)));
        tx.send(taken.map(|g| g.map(|g| g.release()))).unwrap();
    });
    let limit = scale(Duration::from_secs(10));
    wait_until("C queues behind the entry ahead", limit, || {
        facts.entries_under(&y).len() == 2
    });
    let blocker = share_lock(&server, &y);
    // The entry ahead expires; C's confirm then waits for Y's row.
    wait_until("C's confirm waits for Y's row", limit, || {
        waits_for_a_lock(&facts)
    });
    let blocked_at = BootInstant::now();
    wait_until(
        "renewals acknowledged two TTLs on, or X lost",
        scale(WATCHED + Duration::from_secs(10)),
        || {
            held.lost().is_lost()
                || c.last_acknowledged()
                    .is_some_and(|t| t > blocked_at + WATCHED)
        },
    );
    assert_eq!(
        held.lost().reason(),
        None,
        "X was lost while C's confirm of Y waited"
    );
    assert!(rx.try_recv().is_err(), "the confirm still waits");
    commit(&blocker);
    rx.recv_timeout(limit)
        .expect("the confirm returns once the transaction ended")
        .expect("the acquisition")
        .expect("Y is C's")
        .expect("Y released");
    held.release().unwrap();
    c.close().unwrap();
}

/// An older backup restored under a running client can bring back an
/// entry of its live session that it already released (here: the lock's
/// queue row inserted again as it was while held). The client finds it
/// among its session's entries and releases it within about a TTL, so the
/// lock is free again; meanwhile every entry it owns stays — a lock it
/// holds throughout, a permit, a reader, a latch's leadership, four
/// threads taking one mutex in turn (`integration::owned`). (Before,
/// the lock stayed held by no one until that client closed.)
#[test]
fn fault_an_entry_a_restore_brought_back_is_released_by_its_own_client() {
    let server = PgServer::start();
    let ttl = Duration::from_secs(1);
    let a = connect(&server.url(), ttl).unwrap();
    let (lock, kept) = (name("restored"), name("kept"));
    let still = a.mutex(&kept).unwrap().lock().unwrap();
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    let row = server.sql(&format!(
        "SELECT format('(%L, %s, %L, %s)', name, seq, entry, session) \
         FROM recipes.queue WHERE name = '{lock}'"
    ));
    held.release().unwrap();
    server.sql(&format!(
        "INSERT INTO recipes.queue (name, seq, entry, session) VALUES {}",
        row.trim()
    ));
    let b = connect(&server.url(), ttl).unwrap();
    integration::owned::a_restored_entry_is_released(&a, &b, &lock, still.lost(), ttl * 4);
    still.check().unwrap();
    still.release().unwrap();
    b.close().unwrap();
    a.close().unwrap();
}
