//! The etcd read-write lock's watches: a reader hears the writers' keys
//! and its own lease's reader keys, not the other readers' (`hub`). Its
//! own key's deletion by someone else is still loss, held or waiting; a
//! writer's key outside `write/` still wakes it; a reader behind a writer
//! that heard every writer ahead deleted enters without a read.
//!
//! Each test starts its own server: one counts the server's requests.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::time::Duration;

use integration::{scale, wait_until, EtcdServer};
use recipes_core::{Error, LossReason};
use recipes_etcd::RwLockReadGuard;

fn loss_bound() -> Duration {
    scale(Duration::from_secs(10))
}

/// A held reader's key deleted by someone else: its guard loses, and only
/// its guard — not another reader of the same client (the same lease, the
/// same watch), nor another client's. Then the same for a writer.
#[test]
fn a_deleted_readers_key_is_its_guards_loss_and_no_one_elses() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let (a, b) = (connect(&server), connect(&server));
    let name = lock_name("rw-watch-deleted");
    let r1 = a.rw_lock(&name).unwrap().read().unwrap();
    let r2 = a.rw_lock(&name).unwrap().read().unwrap();
    let r3 = b.rw_lock(&name).unwrap().read().unwrap();
    delete_key(&facts, r1.holder());
    assert_eq!(
        r1.lost().wait_timeout(loss_bound()),
        Some(LossReason::Deleted)
    );
    assert!(
        !r2.is_lost() && !r3.is_lost(),
        "only the deleted key's guard"
    );
    match r1.release() {
        Err(Error::LeaseLost {
            reason: LossReason::Deleted,
        }) => {}
        other => panic!("a release after the key went: expected LeaseLost, got {other:?}"),
    }
    // The second reader of the client still hears its own key.
    delete_key(&facts, r2.holder());
    assert_eq!(
        r2.lost().wait_timeout(loss_bound()),
        Some(LossReason::Deleted)
    );
    assert!(!r3.is_lost());
    drop(r2);
    r3.release().unwrap();
    wait_keys(&facts, &name, 0);

    let w = b.rw_lock(&name).unwrap().write().unwrap();
    delete_key(&facts, w.holder());
    assert_eq!(
        w.lost().wait_timeout(loss_bound()),
        Some(LossReason::Deleted)
    );
    drop(w);
    // A new reader of the client after its held readers went: the watch
    // of its lease's reader keys serves it again.
    let again = a.rw_lock(&name).unwrap().read().unwrap();
    delete_key(&facts, again.holder());
    assert_eq!(
        again.lost().wait_timeout(loss_bound()),
        Some(LossReason::Deleted)
    );
    drop(again);
    wait_keys(&facts, &name, 0);
}

/// A reader waiting behind a writer whose key is deleted by someone else
/// hears it at once and enters the queue again (a new key), while the
/// writer still holds; it enters once the writer leaves.
#[test]
fn a_waiting_readers_deleted_key_is_heard_and_it_queues_again() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let (a, b) = (connect(&server), connect(&server));
    let name = lock_name("rw-watch-waiting");
    let w = a.rw_lock(&name).unwrap().write().unwrap();
    let rw_b = b.rw_lock(&name).unwrap();
    let reader = std::thread::spawn(move || rw_b.read());
    let queued = wait_keys(&facts, &name, 2);
    let first = queued
        .iter()
        .find(|k| k.contains("/read/"))
        .expect("the reader's key")
        .clone();
    delete_key(&facts, &first);
    wait_until("the reader queues again", SOON, || {
        let now = keys(&facts, &name);
        now.len() == 2 && now.iter().any(|k| k.contains("/read/") && *k != first)
    });
    assert!(!reader.is_finished(), "the writer still holds");
    let write_token = w.token();
    w.release().unwrap();
    wait_until("the reader enters", SOON, || reader.is_finished());
    let r: RwLockReadGuard = reader.join().unwrap().unwrap();
    assert!(r.token() > write_token);
    r.release().unwrap();
    wait_keys(&facts, &name, 0);
}

/// A key under the name outside `read/` and `write/` counts as a writer
/// (as a Go writer sees it): a reader waits for it, on the name's watch,
/// and enters once it is deleted. Twice: the second wait finds that watch
/// in place.
#[test]
fn a_reader_waits_for_a_writers_key_outside_write() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let (a, b) = (connect(&server), connect(&server));
    let name = lock_name("rw-watch-foreign");
    for round in 0..2 {
        let foreign = format!("{name}/other-{round}");
        put_key(&facts, &foreign, "");
        let rw_b = b.rw_lock(&name).unwrap();
        assert!(rw_b.try_read().unwrap().is_none(), "a writer's key ahead");
        let reader = std::thread::spawn(move || rw_b.read());
        wait_keys(&facts, &name, 2);
        // Another client's reader behind it waits too, and leaves.
        let rw_a = a.rw_lock(&name).unwrap();
        assert!(rw_a.try_read().unwrap().is_none());
        assert!(!reader.is_finished(), "waits for the key ahead");
        delete_key(&facts, &foreign);
        wait_until("the reader enters", SOON, || reader.is_finished());
        reader.join().unwrap().unwrap().release().unwrap();
        wait_keys(&facts, &name, 0);
    }
}

/// R1 holds, W waits behind it, R2 behind W. R1's release lets W in, W's
/// lets R2 in: R2 follows only W (R1 is a reader), so W's deletion tells
/// it that it is first, and neither wake costs a read. R2's fence is the
/// revision of W's deletion.
#[test]
fn a_reader_behind_a_writer_enters_without_a_read() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let clients: Vec<_> = (0..3).map(|_| connect(&server)).collect();
    let name = lock_name("rw-watch-no-read");
    let r1 = clients[0].rw_lock(&name).unwrap().read().unwrap();
    let rw_w = clients[1].rw_lock(&name).unwrap();
    let writer = std::thread::spawn(move || rw_w.write());
    wait_keys(&facts, &name, 2);
    let rw_r = clients[2].rw_lock(&name).unwrap();
    let reader = std::thread::spawn(move || rw_r.read());
    wait_keys(&facts, &name, 3);
    let reads = range_rpcs(&server);
    r1.release().unwrap();
    wait_until("the writer enters", SOON, || writer.is_finished());
    let w = writer.join().unwrap().unwrap();
    assert!(!reader.is_finished(), "the reader waits for the writer");
    w.release().unwrap();
    let deleted_at = store_revision(&facts);
    wait_until("the reader enters", SOON, || reader.is_finished());
    let r = reader.join().unwrap().unwrap();
    assert_eq!(
        range_rpcs(&server) - reads,
        1.0,
        "no wake read (the one read is the test's own)"
    );
    assert_eq!(
        r.token().get(),
        deleted_at as u64,
        "the fence is the revision of the writer's deletion"
    );
    r.release().unwrap();
    wait_keys(&facts, &name, 0);
}
