//! Lease mode's read-write lock through its gate (layout 5): readers enter
//! and confirm together, ordered against writers by a transaction-scoped
//! advisory lock instead of the name's row. The race the gate closes:
//! readers and a writer entering and confirming at the same moment from
//! clients of their own — never a writer beside a reader, and tokens in
//! the guide's order (a writer's above every earlier holder's, a reader's
//! above every earlier writer's) — and the fenced checks of both sides.

mod pg_common;

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use integration::{scale, PgFacts, PgServer};
use pg_common::*;
use recipes_core::{Client, FencingToken};
use recipes_pg::tokio_postgres::types::Type;
use recipes_pg::{FencedTransaction, PgClient, PgMode};

/// Who holds, as the test's threads saw their guards: marked after a
/// take returned, unmarked before the release is sent (so the marks are
/// inside the store's holdings), and the tokens granted so far.
struct Seen {
    readers: usize,
    writer: bool,
    last_write: FencingToken,
    top: FencingToken,
    takes: usize,
}

impl Seen {
    fn took(&mut self, write: bool, token: FencingToken) {
        assert!(!self.writer, "a {} beside a writer", role(write));
        if write {
            assert_eq!(self.readers, 0, "a writer beside a reader");
            assert!(
                token > self.top,
                "write token {token:?} not above every earlier one"
            );
            self.writer = true;
            self.last_write = token;
        } else {
            assert!(
                token > self.last_write,
                "read token {token:?} not above the last write's"
            );
            self.readers += 1;
        }
        self.top = self.top.max(token);
        self.takes += 1;
    }

    fn gives_back(&mut self, write: bool) {
        if write {
            self.writer = false;
        } else {
            self.readers -= 1;
        }
    }
}

fn role(write: bool) -> &'static str {
    if write {
        "writer"
    } else {
        "reader"
    }
}

/// Two readers and a writer, each on a client of its own, start together
/// and take the lock over and over: their enters, confirms and releases
/// race at the server every round. Each holding writes fenced (the readers
/// a put, the writer a transaction) and none is refused. Every take hears
/// of the release it waits for (a reader's release notifies only when a
/// writer is queued behind it): with polls of a minute and sessions of
/// 30 s, a missed notification fails the take's 10 s.
#[test]
fn two_readers_and_a_writer_entering_at_once_never_overlap() {
    at_once_never_overlap(PgMode::Lease);
}

/// The same race in session mode, whose readers draw their tokens from
/// the same sequence without the name's row.
#[test]
fn session_two_readers_and_a_writer_entering_at_once_never_overlap() {
    at_once_never_overlap(PgMode::Session);
}

/// Eight readers, each on a client of its own, take a name nobody used
/// yet at the same moment, ten names over: every one holds (one of them
/// makes the name's row while the others' statements run), and all at
/// once (readers share).
#[test]
fn eight_readers_first_on_a_name_all_hold() {
    for mode in [PgMode::Lease, PgMode::Session] {
        let server = PgServer::shared();
        let clients: Vec<PgClient> = (0..8)
            .map(|_| {
                PgClient::builder(server.url().as_str())
                    .ttl(TTL)
                    .mode(mode)
                    .connect()
                    .unwrap()
            })
            .collect();
        for _ in 0..10 {
            let n = name("rw-first-readers");
            let start = Barrier::new(clients.len());
            let guards: Vec<_> = thread::scope(|s| {
                let takes: Vec<_> = (clients.iter())
                    .map(|c| {
                        let (n, start) = (&n, &start);
                        s.spawn(move || {
                            let rw = c.rw_lock(n).unwrap();
                            start.wait();
                            rw.try_read_for(scale(Duration::from_secs(10)))
                        })
                    })
                    .collect();
                takes.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for g in guards {
                let g = g
                    .unwrap_or_else(|e| panic!("{mode:?}: a first reader failed: {e}"))
                    .unwrap_or_else(|| panic!("{mode:?}: a first reader did not hold"));
                g.release().unwrap();
            }
            let left = PgFacts::new(server.addr()).entries_under(&n);
            assert!(left.is_empty(), "{mode:?}: left behind: {left:?}");
        }
        for c in clients {
            c.close().unwrap();
        }
    }
}

fn at_once_never_overlap(mode: PgMode) {
    const ROUNDS: usize = 15;
    let server = PgServer::shared();
    let n = name("rw-gate-race");
    let t = table(server, "rwgate");
    server.sql(&format!("INSERT INTO {t} (fence) VALUES (0)"));
    let seen = Arc::new(Mutex::new(Seen {
        readers: 0,
        writer: false,
        last_write: FencingToken(0),
        top: FencingToken(0),
        takes: 0,
    }));
    let start = Arc::new(Barrier::new(3));
    let threads: Vec<_> = [true, false, false]
        .into_iter()
        .enumerate()
        .map(|(i, write)| {
            let (url, n, t) = (server.url(), n.clone(), t.clone());
            let (seen, start) = (seen.clone(), start.clone());
            thread::spawn(move || {
                // Polls and sessions far longer than a take may wait: a
                // take hears of the entry it waits on, or fails.
                let c = PgClient::builder(url.as_str())
                    .ttl(Duration::from_secs(30))
                    .poll_interval(Duration::from_secs(60))
                    .mode(mode)
                    .connect()
                    .unwrap();
                let rw = c.rw_lock(&n).unwrap();
                let heard = scale(Duration::from_secs(10));
                start.wait();
                for round in 0..ROUNDS {
                    if write {
                        let w = rw
                            .try_write_for(heard)
                            .unwrap()
                            .expect("heard of the readers");
                        seen.lock().unwrap().took(true, w.token());
                        let fence = i64::try_from(w.token().0).unwrap();
                        let sql = format!("UPDATE {t} SET fence = $1 WHERE fence < $1");
                        let changed = w
                            .lease()
                            .transaction(|tx| tx.execute(&sql, &[(&fence, Type::INT8)]))
                            .expect("the writer's fenced transaction");
                        assert_eq!(changed, 1, "the write token is above every earlier one");
                        seen.lock().unwrap().gives_back(true);
                        w.release().unwrap();
                    } else {
                        let r = rw
                            .try_read_for(heard)
                            .unwrap()
                            .expect("heard of the writer");
                        seen.lock().unwrap().took(false, r.token());
                        r.put(&format!("{n}-res-{i}"), format!("{round}").as_bytes())
                            .expect("the reader's fenced put");
                        seen.lock().unwrap().gives_back(false);
                        r.release().unwrap();
                    }
                }
                c.close().unwrap();
            })
        })
        .collect();
    for th in threads {
        th.join().expect("a contender failed");
    }
    assert_eq!(seen.lock().unwrap().takes, 3 * ROUNDS);
    assert!(
        PgFacts::new(server.addr()).entries_under(&n).is_empty(),
        "every entry is gone"
    );
}

/// A writer's fenced transaction holds the gate exclusive to its commit:
/// a reader queued behind the writer does not hold while it is open, even
/// once the writer's row is gone (deleted behind its back mid-transaction),
/// and holds after the commit with a higher token. A reader's fenced
/// transaction holds the gate shared: another reader takes the lock
/// meanwhile, a writer does not.
#[test]
fn fenced_transactions_hold_the_gate_for_their_side() {
    let server = PgServer::shared();
    let n = name("rw-gate-tx");
    let url = server.url();
    // Their fenced transactions stay open while the test waits (the server
    // ends one idle for longer than the TTL).
    let long = Duration::from_secs(10);
    let (a, c) = (connect(&url, long).unwrap(), connect(&url, TTL).unwrap());
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (reader_url, reader_name) = (url.clone(), n.clone());
    let reader = thread::spawn(move || {
        let b = connect(&reader_url, long).unwrap();
        let r = b.rw_lock(&reader_name).unwrap().read().unwrap();
        tx.send(r.token()).unwrap();
        (b, r)
    });
    let facts = PgFacts::new(server.addr());
    integration::wait_until("the reader queues", scale(Duration::from_secs(10)), || {
        facts.entries_under(&n).len() == 2
    });
    let blocked = scale(Duration::from_millis(300));
    w.lease()
        .transaction(|_tx| {
            server.sql(&format!(
                "DELETE FROM recipes.queue WHERE name = '{n}' AND role = 'write'"
            ));
            assert!(
                rx.recv_timeout(blocked).is_err(),
                "a reader held inside a writer's fenced transaction"
            );
            Ok(())
        })
        .expect("checked when it began");
    let read_token = rx
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("the reader holds once the transaction ended");
    assert!(read_token > w.token());
    let _ = w.release();
    let (b, r) = reader.join().unwrap();
    let other = c.rw_lock(&n).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let read_token = r.token();
    r.lease()
        .transaction(|_tx| {
            let r2 = other
                .try_read()
                .unwrap()
                .expect("readers pass a shared gate");
            assert!(r2.token() > read_token);
            r2.release().unwrap();
            let (url, n) = (url.clone(), n.clone());
            thread::spawn(move || {
                let d = connect(&url, TTL).unwrap();
                let w = d.rw_lock(&n).unwrap().write().unwrap();
                tx.send(w.token()).unwrap();
                w.release().unwrap();
                d.close().unwrap();
            });
            assert!(
                rx.recv_timeout(blocked).is_err(),
                "a writer held inside a reader's fenced transaction"
            );
            Ok(())
        })
        .unwrap();
    r.release().unwrap();
    let write_token = rx
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("the writer holds once the reader is gone");
    assert!(write_token > read_token);
    for client in [a, b, c] {
        client.close().unwrap();
    }
}

/// Session mode: a writer whose lock backend is terminated inside its
/// fenced transaction may still commit it (its check passed while it
/// held), so no reader may hold before that commit: the writer's check
/// took the name's gate exclusive, and a reader's mint waits for it
/// shared. Before, the reader minted at once and held while the lost
/// writer's statements still ran and then committed.
#[test]
fn session_a_lost_writers_open_fenced_transaction_commits_before_a_reader_holds() {
    let server = PgServer::shared();
    let facts = PgFacts::new(server.addr());
    let t = table(server, "rw_lost_writer");
    let n = name("rw-lost-writer");
    let session = || {
        PgClient::builder(server.url().as_str())
            .ttl(TTL)
            .mode(PgMode::Session)
            .connect()
            .unwrap()
    };
    let (a, b) = (session(), session());
    let w = a.rw_lock(&n).unwrap().write().unwrap();
    let (holder, fence) = (w.holder().to_owned(), w.token().get() as i64);
    let insert = format!("INSERT INTO {t} (fence) VALUES ($1)");
    let (inside_tx, inside) = crossbeam_channel::bounded(1);
    let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
    let writer = thread::spawn(move || {
        let done = w.lease().transaction(|tx| {
            tx.execute(&insert, &[(&fence, Type::INT8)])?;
            inside_tx.send(()).unwrap();
            go.recv().unwrap();
            tx.execute(&insert, &[(&(fence + 1), Type::INT8)])
        });
        (done, w)
    });
    inside
        .recv_timeout(scale(Duration::from_secs(10)))
        .expect("the writer's transaction began");
    facts.terminate(&holder);
    let (held_tx, held) = crossbeam_channel::bounded(1);
    let (rw, seen_server, seen_table) = (
        b.rw_lock(&n).unwrap(),
        PgFacts::new(server.addr()),
        t.clone(),
    );
    let reader = thread::spawn(move || {
        let r = rw.read();
        // What had committed when the reader began to hold.
        let rows = seen_server.sql(&format!("SELECT count(*) FROM {seen_table}"));
        held_tx.send(rows.trim().to_owned()).unwrap();
        r
    });
    let gate_waits = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
         AND classid::int8 = 1919247223 AND objid::int8 = hashtext('{n}')::int8 & 4294967295"
    );
    let early = integration::wait_for(
        "the reader holds or waits at the gate",
        scale(Duration::from_secs(20)),
        || match held.try_recv() {
            Ok(rows) => Some(Some(rows)),
            Err(_) if facts.sql(&gate_waits).trim() != "0" => Some(None),
            Err(_) => None,
        },
    );
    assert_eq!(
        early, None,
        "a reader held while the lost writer's fenced transaction was open"
    );
    go_tx.send(()).unwrap();
    let (done, w) = writer.join().unwrap();
    done.expect("the transaction, checked while the writer held, commits");
    let rows = held
        .recv_timeout(scale(Duration::from_secs(20)))
        .expect("the reader holds");
    assert_eq!(
        rows, "2",
        "the writer's transaction committed before the reader held"
    );
    let r = reader.join().unwrap().expect("the reader holds");
    assert!(
        r.token() > w.token(),
        "a reader's token is above the writer's"
    );
    r.release().unwrap();
    drop(w);
    a.close().unwrap();
    b.close().unwrap();
}
