//! Session mode (advisory locks) losing its rows under a holder: the
//! heartbeat rows of `recipes.advisory`, the names' rows of
//! `recipes.names`. A heartbeat makes its lost row again, so the next
//! holder still waits out a holder its server ended; a reader or a permit
//! whose name's row went loses its lock, as a mutex or a writer does. Each
//! test has its own server (`fault` in the name: they run one at a time).

mod pg_common;

use std::time::Duration;

use integration::{scale, seen_within, wait_for, wait_until, PgServer, Proxy};
use pg_common::*;
use recipes_core::{Client, LossSignal};
use recipes_pg::PgClient;

/// A session-mode client of `url` whose heartbeats come every third of
/// `ttl`.
fn session_client(url: &str, ttl: Duration) -> PgClient {
    PgClient::builder(url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .session_mode()
        .connect()
        .unwrap()
}

/// A holding kept alive by the test, and its loss.
type Holding = (Box<dyn std::any::Any>, LossSignal);

/// Whether `row` is in `recipes.advisory` with a heartbeat time.
fn beating(server: &PgServer, row: &str) -> bool {
    let sql = format!(
        "SELECT count(*) FROM recipes.advisory WHERE key = '{row}' AND beat_at IS NOT NULL"
    );
    server.sql(&sql).trim() == "1"
}

/// The PID of the one backend that holds an advisory lock.
fn holder_pid(server: &PgServer) -> String {
    let sql = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted";
    server.sql(sql).trim().to_owned()
}

/// The holder whose backend is `pid`, reached through `proxy`, cut off
/// and its backend ended by the server: by the time the next holder holds
/// (`next`, returned), the cut-off one's `lost` has fired.
fn loses_before_the_next_holds<T>(
    server: &PgServer,
    proxy: &Proxy,
    pid: &str,
    lost: &LossSignal,
    next: impl FnOnce() -> T,
) -> T {
    proxy.blackhole();
    server.sql(&format!("SELECT pg_terminate_backend({pid})"));
    let taken = next();
    assert!(
        lost.is_lost(),
        "the next holder held while the cut-off one still believed it held"
    );
    taken
}

/// After `recipes.advisory` was truncated under a session-mode holding,
/// the holder's next heartbeat makes its row again.
#[test]
fn fault_session_mode_a_truncated_heartbeat_row_comes_back_at_the_next_heartbeat() {
    let server = PgServer::start();
    let c = session_client(&server.url(), TTL);
    let lock = name("beat-back");
    let held = c.mutex(&lock).unwrap().lock().unwrap();
    let bound = scale(Duration::from_secs(10));
    wait_until("the holder's row", bound, || beating(&server, &lock));
    server.sql("TRUNCATE recipes.advisory");
    assert!(!beating(&server, &lock));
    wait_until("the holder's row again", bound, || beating(&server, &lock));
    held.release().unwrap();
    c.close().unwrap();
}

/// A holding taken through a proxy loses `recipes.advisory` (truncated),
/// keeps beating past that, is cut off and its backend ended by the
/// server (the client does not hear of it): the next holder, granted the
/// key at once, still waits out the cut-off holder's deadline, so its
/// loss has fired before the next one holds. (The heartbeats only
/// updated the row: none was there, and the next holder held at once,
/// while the cut-off one believed it held for up to a TTL.)
fn next_waits_out_a_holder_whose_row_was_truncated(
    hold: impl FnOnce(&PgClient, &str) -> Holding,
    next: impl FnOnce(&PgClient, &str) -> Option<Box<dyn std::any::Any>>,
) {
    let server = PgServer::start();
    let proxy = Proxy::start(server.addr());
    let via = format!("postgresql://postgres@{}/recipes", proxy.addr());
    let a = session_client(&via, TTL);
    let b = session_client(&server.url(), TTL);
    let lock = name("beat-truncated");
    let (held, lost) = hold(&a, &lock);
    let pid = holder_pid(&server);
    server.sql("TRUNCATE recipes.advisory");
    // Wait for a heartbeat of the holder's to start after the truncate.
    let truncated = server.sql("SELECT clock_timestamp()");
    let beat_since = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} \
         AND query_start > '{}'::timestamptz AND state = 'idle'",
        truncated.trim()
    );
    wait_until("a heartbeat after the truncate", scale(TTL * 3), || {
        server.sql(&beat_since).trim() == "1"
    });
    let taken = loses_before_the_next_holds(&server, &proxy, &pid, &lost, || {
        next(&b, &lock).expect("the next holder gets in")
    });
    drop(taken);
    proxy.restore();
    drop(held);
    b.close().unwrap();
}

/// A heartbeat of the lock connection that runs after a try took the key
/// and stamped it, but before the client knows it holds (the take's reply
/// held up), renews the lock session: it must stamp the key too. (It
/// stamped nothing, the key not yet among those it stamps, and its
/// acknowledgement moved the holder's deadline past the key's stamp: the
/// holder, then cut off and its backend ended by the server, still
/// believed it held when the next one, having waited out the stamp, held.)
#[test]
fn fault_session_mode_a_heartbeat_while_a_take_is_answered_stamps_the_key() {
    let server = PgServer::start();
    let proxy = Proxy::start(server.addr());
    let via = format!("postgresql://postgres@{}/recipes", proxy.addr());
    let ttl = Duration::from_secs(3);
    let (a, b) = (
        session_client(&via, ttl),
        session_client(&server.url(), ttl),
    );
    let lock = name("beat-while-taken");
    let m = a.mutex(&lock).unwrap();
    // A lock connection with the take's statement prepared, kept idle for
    // the next acquisition: a take that needs no reply before it runs.
    m.lock().unwrap().release().unwrap();
    proxy.freeze_replies();
    let taking = std::thread::spawn(move || m.try_lock());
    let bound = scale(Duration::from_secs(10));
    let pid = wait_for("the take ran at the server", bound, || {
        Some(holder_pid(&server)).filter(|pid| !pid.is_empty())
    });
    let took = server.sql("SELECT clock_timestamp()");
    // The lock connection's next heartbeat is due a third of the TTL
    // after its session began: it runs behind the take, unless it waits
    // for the take to be known (then it never runs while the reply is
    // held, and the reply is let through after half the TTL).
    let beat = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} \
         AND query_start > '{}'::timestamptz AND query LIKE 'WITH ok AS%'",
        took.trim()
    );
    seen_within(ttl / 2, || server.sql(&beat).trim() == "1");
    proxy.restore();
    let held = taking.join().unwrap().unwrap().expect("the lock was free");
    let next = loses_before_the_next_holds(&server, &proxy, &pid, held.lost(), || {
        b.mutex(&lock).unwrap().lock().unwrap()
    });
    drop(next);
    proxy.restore();
    drop(held);
    b.close().unwrap();
}

/// An acquisition that waits out a previous holder's deadline, and whose
/// lock connection stops answering meanwhile (a heartbeat's reply never
/// comes), loses its lock session during that wait (its TTL is shorter
/// than the wait), ends its attempt then and starts over; once the server
/// answers again it holds, with a guard that is not lost. (Its confirm
/// ran on past the loss and handed over a guard lost already; the engine
/// now ends a confirm whose epoch is lost.)
#[test]
fn fault_session_mode_a_take_whose_connection_stops_answering_starts_over() {
    let server = PgServer::start();
    let proxy = Proxy::start(server.addr());
    let via = format!("postgresql://postgres@{}/recipes", proxy.addr());
    let facts = integration::PgFacts::new(server.addr());
    let lock = name("beat-hangs");
    // A holder whose backend ends with its stamp live (4 s to wait out).
    let x = session_client(&server.url(), Duration::from_secs(4));
    let held = x.mutex(&lock).unwrap().lock().unwrap();
    server.sql(&format!(
        "SELECT pg_terminate_backend({})",
        holder_pid(&server)
    ));
    let b = PgClient::builder(&via)
        .ttl(Duration::from_secs(3))
        .rpc_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
        .session_mode()
        .connect()
        .unwrap();
    // A lock connection with its statements prepared, kept idle.
    b.mutex(&name("beat-hangs-warm"))
        .unwrap()
        .lock()
        .unwrap()
        .release()
        .unwrap();
    let m = b.mutex(&lock).unwrap();
    let (tx, taken) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(m.lock().map(|g| g.release()));
    });
    let bound = scale(Duration::from_secs(10));
    let pid = wait_for("B took the key", bound, || {
        Some(holder_pid(&server)).filter(|pid| !pid.is_empty())
    });
    // B read how long to wait the previous holder out, and waits.
    let waits = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND state = 'idle' \
         AND query LIKE 'SELECT max(extract(epoch FROM beat_at%'"
    );
    wait_until("B waits the holder out", bound, || {
        server.sql(&waits).trim() == "1"
    });
    proxy.freeze_replies();
    // Its lock session was lost (no heartbeat answered for its TTL) and
    // revoked: the unlock reached the server.
    wait_until("B gave the key back", bound, || {
        facts.advisory(&lock, true).is_empty()
    });
    proxy.restore();
    // B starts over and holds once the server answers again, on a live
    // lock session: its release is clean.
    let released = taken.recv_timeout(scale(Duration::from_secs(20)));
    assert!(
        matches!(released, Ok(Ok(Ok(())))),
        "B's lock once its connection answers again: {released:?}"
    );
    drop(held);
    b.close().unwrap();
}

#[test]
fn fault_session_mode_next_holder_waits_out_a_mutex_whose_row_was_truncated() {
    next_waits_out_a_holder_whose_row_was_truncated(
        |c, lock| {
            let g = c.mutex(lock).unwrap().lock().unwrap();
            let lost = g.lost().clone();
            (Box::new(g), lost)
        },
        |c, lock| {
            let m = c.mutex(lock).unwrap();
            let g = m.try_lock_for(scale(Duration::from_secs(20))).unwrap();
            g.map(|g| Box::new(g) as Box<dyn std::any::Any>)
        },
    );
}

#[test]
fn fault_session_mode_a_writer_waits_out_a_reader_whose_row_was_truncated() {
    next_waits_out_a_holder_whose_row_was_truncated(
        |c, lock| {
            let g = c.rw_lock(lock).unwrap().read().unwrap();
            let lost = g.lost().clone();
            (Box::new(g), lost)
        },
        |c, lock| {
            let rw = c.rw_lock(lock).unwrap();
            let g = rw.try_write_for(scale(Duration::from_secs(20))).unwrap();
            g.map(|g| Box::new(g) as Box<dyn std::any::Any>)
        },
    );
}

/// `TRUNCATE recipes.names CASCADE` under a session-mode holding whose
/// fenced writes need its name's row: it loses its lock within a few
/// heartbeats. (Only a mutex and a writer were checked: a reader's or a
/// permit's heartbeats passed on `pg_locks` alone, and its writes were
/// refused with no loss.)
fn names_truncated_loses(hold: impl FnOnce(&PgClient, &str) -> Holding) {
    let server = PgServer::start();
    let c = session_client(&server.url(), Duration::from_secs(1));
    let (held, lost) = hold(&c, &name("names-truncated"));
    server.sql("TRUNCATE recipes.names CASCADE");
    assert!(
        lost.wait_timeout(scale(Duration::from_secs(3))).is_some(),
        "the holding whose name's row went did not lose its lock"
    );
    drop(held);
    c.close().unwrap();
}

#[test]
fn fault_session_mode_a_reader_whose_names_row_was_truncated_loses() {
    names_truncated_loses(|c, lock| {
        let g = c.rw_lock(lock).unwrap().read().unwrap();
        let lost = g.lost().clone();
        (Box::new(g), lost)
    });
}

#[test]
fn fault_session_mode_a_permit_whose_names_row_was_truncated_loses() {
    names_truncated_loses(|c, lock| {
        let p = c.semaphore(lock, 2).unwrap().acquire().unwrap();
        let lost = p.lost().clone();
        (Box::new(p), lost)
    });
}

/// A downgraded writer reads on: its name's row truncated, it loses too.
#[test]
fn fault_session_mode_a_downgraded_writer_whose_names_row_was_truncated_loses() {
    names_truncated_loses(|c, lock| {
        let w = c.rw_lock(lock).unwrap().write().unwrap();
        let r = w.downgrade().unwrap();
        let lost = r.lost().clone();
        (Box::new(r), lost)
    });
}

/// The name of the one reader's heartbeat row of `lock`.
fn reader_row(server: &PgServer, lock: &str) -> String {
    let sql = format!(
        "SELECT key FROM recipes.advisory WHERE starts_with(key, '{lock}' || chr(31) || 'reader-')"
    );
    let rows = server.sql(&sql);
    let rows: Vec<&str> = rows
        .lines()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "one reader's row of {lock}: {rows:?}");
    rows[0].to_owned()
}

/// A reader whose backend was ended leaves its heartbeat row (its
/// deadline) for the next writer to wait out. A later backend given the
/// same PID (here: the reader's own connection, kept idle, stands for it,
/// with the dead reader's row named as an earlier backend of that PID
/// would name it) reads and releases the same key: the dead reader's row
/// is still there, and the writer after them holds only once its deadline
/// passed. (With rows named by the PID alone, the later reader stamped
/// the dead one's row as its own and deleted it on release: the writer
/// held while the dead reader could still believe it read.)
#[test]
fn fault_session_mode_a_reader_given_a_dead_readers_pid_leaves_its_row_to_be_waited_out() {
    let server = PgServer::start();
    let c = session_client(&server.url(), TTL);
    let lock = name("reader-pid");
    let rw = c.rw_lock(&lock).unwrap();
    let first = rw.read().unwrap();
    let (ours, holder) = (reader_row(&server, &lock), first.holder().to_owned());
    first.release().unwrap();
    // The dead reader: the same PID, an earlier backend's start (when the
    // row names one), a heartbeat now whose deadline is 3 s out.
    let (key, backend) = ours.split_once("\u{1f}reader-").unwrap();
    let dead = match backend.split_once('-') {
        Some((pid, start)) => {
            let start = start.parse::<i64>().unwrap() - 1;
            format!("{key}\u{1f}reader-{pid}-{start}")
        }
        None => ours.clone(),
    };
    server.sql(&format!(
        "INSERT INTO recipes.advisory (key, beat_at, ttl) VALUES \
         ('{dead}', clock_timestamp(), interval '3 seconds')"
    ));
    let again = rw.read().unwrap();
    assert_eq!(
        again.holder(),
        holder,
        "the second read ran on the same backend"
    );
    again.release().unwrap();
    let sql = format!("SELECT count(*) FROM recipes.advisory WHERE key = '{dead}'");
    assert_eq!(
        server.sql(&sql).trim(),
        "1",
        "the dead reader's row is gone"
    );
    let writer = rw.write().unwrap();
    let sql = format!(
        "SELECT beat_at + ttl <= clock_timestamp() FROM recipes.advisory WHERE key = '{dead}'"
    );
    assert_eq!(
        server.sql(&sql).trim(),
        "t",
        "the writer held before the dead reader's deadline"
    );
    writer.release().unwrap();
    c.close().unwrap();
}

/// A dead reader's row stays only until it makes no one wait: a writer's
/// mint deletes the reader rows of its key whose deadline passed over a
/// minute ago (rows are named by backend, so none is reused), and leaves
/// a later one.
#[test]
fn session_mode_a_writer_sweeps_the_rows_of_readers_long_past_their_deadline() {
    let server = PgServer::start();
    let c = session_client(&server.url(), TTL);
    let lock = name("reader-sweep");
    let rw = c.rw_lock(&lock).unwrap();
    rw.read().unwrap().release().unwrap();
    let (old, recent) = ("1-1", "2-2");
    server.sql(&format!(
        "INSERT INTO recipes.advisory (key, beat_at, ttl) VALUES \
         ('{lock}' || chr(31) || 'reader-{old}', clock_timestamp() - interval '2 minutes', \
          interval '1 second'), \
         ('{lock}' || chr(31) || 'reader-{recent}', clock_timestamp() - interval '30 seconds', \
          interval '1 second')"
    ));
    rw.write().unwrap().release().unwrap();
    let sql = format!(
        "SELECT string_agg(split_part(key, chr(31), 2), ',' ORDER BY key) FROM recipes.advisory \
         WHERE starts_with(key, '{lock}' || chr(31))"
    );
    assert_eq!(server.sql(&sql).trim(), format!("reader-{recent}"));
    c.close().unwrap();
}

/// On a name only readers use, no writer's mint sweeps: a client's
/// session grant (at connect) deletes, in the background, every reader
/// row whose deadline passed over a minute ago, and leaves a later one.
#[test]
fn session_mode_a_grant_sweeps_the_rows_of_readers_long_past_their_deadline() {
    let server = PgServer::start();
    session_client(&server.url(), TTL).close().unwrap();
    let lock = name("reader-grant-sweep");
    server.sql(&format!(
        "INSERT INTO recipes.advisory (key, beat_at, ttl) VALUES \
         ('{lock}' || chr(31) || 'reader-1-1', clock_timestamp() - interval '2 minutes', \
          interval '1 second'), \
         ('{lock}' || chr(31) || 'reader-2-2', clock_timestamp(), interval '1 second')"
    ));
    let c = session_client(&server.url(), TTL);
    let sql = format!(
        "SELECT string_agg(split_part(key, chr(31), 2), ',' ORDER BY key) FROM recipes.advisory \
         WHERE starts_with(key, '{lock}' || chr(31))"
    );
    wait_until(
        "the dead reader's row is swept",
        scale(Duration::from_secs(10)),
        || server.sql(&sql).trim() == "reader-2-2",
    );
    c.close().unwrap();
}

/// A holding lost at its deadline while its connection's replies were
/// held (its lock session revoked, the key unlocked at the server), then
/// released after the next holder took the key: its release leaves the
/// key's heartbeat row, the next holder's stamp, alone. (It cleared it,
/// and so the row of whoever held the key: a next holder then cut off
/// and ended by the server was not waited out, as if it had released.)
#[test]
fn fault_session_mode_a_lost_holdings_release_leaves_the_next_holders_stamp() {
    let server = PgServer::start();
    let proxy = Proxy::start(server.addr());
    let via = format!("postgresql://postgres@{}/recipes", proxy.addr());
    let a = session_client(&via, Duration::from_secs(2));
    let b = session_client(&server.url(), Duration::from_secs(60));
    let lock = name("lost-release");
    let held = a.mutex(&lock).unwrap().lock().unwrap();
    proxy.freeze_replies();
    held.lost()
        .wait_timeout(scale(Duration::from_secs(10)))
        .expect("lost at its deadline");
    let next = b.mutex(&lock).unwrap();
    let taken = next
        .try_lock_for(scale(Duration::from_secs(20)))
        .unwrap()
        .expect("the key, unlocked by the lost session's revoke");
    wait_until("the next holder's stamp", scale(TTL * 3), || {
        beating(&server, &lock)
    });
    proxy.restore();
    let _ = held.release();
    assert!(
        beating(&server, &lock),
        "the lost holding's release cleared the next holder's stamp"
    );
    taken.release().unwrap();
    b.close().unwrap();
}
