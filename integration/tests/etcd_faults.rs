//! The etcd lease session under faults, each test on a server of its own
//! (nextest runs `*_fault` tests one at a time): an orphaned lease frees
//! the lock after its TTL, a paused server loses the guard at its
//! deadline, the keep-alive stream reopens after a restart, member kills
//! lose no lock, and a black-holed keep-alive loses before another holder
//! acquires.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::time::Duration;

use integration::runtime::block_on;
use integration::{scale, wait_until, wait_until_with, EtcdCluster, EtcdServer};
use recipes_core::store::{margin, DEFAULT_SLACK};
use recipes_core::{BootInstant, Error, LossReason};
use recipes_etcd::EtcdClient;

/// A client that stops renewing (as a crashed process would) keeps its key
/// until the server expires its lease; its guard is lost before then.
#[test]
fn an_orphaned_lease_frees_the_lock_after_its_ttl_fault() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect_with_ttl(server, SHORT_TTL);
    let b = connect(server);
    let name = lock_name("orphan");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let lease = a.session_id().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    a.orphan();
    let last_ack_deadline = g.valid_until().unwrap();
    let (t2, acquired_at, g2) = waiter.join().unwrap().unwrap();
    assert!(t2 > g.token());
    // Normally the local deadline fires first; the key's deletion (when the
    // server expires the lease) comes later, by at least the margin.
    let reason = g.lost().reason();
    assert!(
        matches!(
            reason,
            Some(LossReason::DeadlineExpired | LossReason::Deleted)
        ),
        "{reason:?}"
    );
    let lost_at = g.valid_until().unwrap();
    assert!(lost_at <= last_ack_deadline);
    assert!(
        lost_at < acquired_at,
        "lost locally ({lost_at:?}) before the server gave the lock away ({acquired_at:?})"
    );
    assert_eq!(facts.lease_time_to_live(lease), -1);
    // A new lease serves the next acquisition.
    let g3 = a
        .mutex(&lock_name("orphan-next"))
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("free");
    assert_ne!(a.session_id(), Some(lease));
    g3.release().unwrap();
    g2.release().unwrap();
    drop(g);
}

/// The server stops answering: keep-alives go unacknowledged and the guard
/// is lost at its local deadline, which ends before the server's lease.
#[test]
fn a_paused_server_loses_the_guard_at_its_deadline_fault() {
    let server = EtcdServer::start();
    let a = connect_with_ttl(&server, SHORT_TTL);
    let name = lock_name("paused");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let lease = a.session_id().unwrap();
    let paused_at = BootInstant::now();
    server.pause();
    let reason = g.lost().wait_timeout(scale(Duration::from_secs(10)));
    server.resume();
    assert_eq!(reason, Some(LossReason::DeadlineExpired));
    let lost = g.valid_until().unwrap();
    // Lower bound, unscaled: the deadline came from an acknowledgement sent
    // before the pause, so it is at most one TTL after it.
    assert!(lost <= paused_at + SHORT_TTL, "{lost:?} vs {paused_at:?}");
    // The lost session revokes its lease once the server answers again (or
    // the server expires it); then the store refuses the old holder.
    server
        .facts()
        .wait_lease_gone(lease, Duration::from_secs(10));
    assert!(matches!(
        g.put(&format!("{name}-x"), b"x"),
        Err(Error::FenceRejected { .. })
    ));
    drop(g);
    // The client recovers with a new lease.
    let g2 = a
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::from_secs(10))
        .unwrap()
        .expect("free");
    g2.release().unwrap();
}

/// etcd-client does not re-open a keep-alive stream whose member died; the
/// session does, and the lease (persisted by the server) lives on.
#[test]
fn the_keep_alive_stream_reopens_after_a_server_restart_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let a = connect_with_ttl(&server, Duration::from_secs(10));
    let name = lock_name("restart");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    server.restart();
    // The old process is gone with its stream: a later deadline can only
    // come from a keep-alive acknowledged on a new stream.
    let before = a.valid_until().unwrap();
    wait_until("keep-alives resume", Duration::from_secs(10), || {
        a.valid_until().is_some_and(|v| v > before)
    });
    assert!(!g.is_lost(), "{:?}", g.lost().reason());
    assert!(facts.exists(g.holder()));
    let b = connect(&server);
    assert!(b.mutex(&name).unwrap().try_lock().unwrap().is_none());
    // The key watch was re-established too: a deletion is still seen.
    let mut raw = facts.client();
    let key = g.holder().to_owned();
    block_on(async move { raw.delete(key, None).await }).unwrap();
    assert_eq!(
        g.lost().wait_timeout(scale(Duration::from_secs(10))),
        Some(LossReason::Deleted)
    );
}

/// Each member of a cluster dies in turn (and comes back): whichever one
/// carried our keep-alive stream, the stream is opened again on another and
/// the lock is never lost.
#[test]
fn member_kills_do_not_lose_the_lock_fault() {
    let cluster = EtcdCluster::start();
    let ttl = Duration::from_secs(5);
    let a = EtcdClient::builder(cluster.endpoints())
        .ttl(ttl)
        .connect()
        .unwrap();
    let b = EtcdClient::builder(cluster.endpoints()).connect().unwrap();
    let name = lock_name("member-kill");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    for i in 0..cluster.members().len() {
        let member = cluster.member(i);
        member.kill();
        let killed_at = BootInstant::now();
        // Only a keep-alive sent after the kill can reach this deadline.
        let renewed = killed_at + ttl - margin(ttl, DEFAULT_SLACK);
        wait_until_with(
            &format!("a keep-alive acknowledged after member {i} died"),
            Duration::from_secs(10),
            || a.valid_until().is_some_and(|v| v >= renewed),
            || cluster.log_tail(),
        );
        assert!(!g.is_lost(), "{:?}", g.lost().reason());
        member.restart();
        cluster.wait_serving(Duration::from_secs(30));
    }
    assert!(b.mutex(&name).unwrap().try_lock().unwrap().is_none());
    let t = g.token();
    g.release().unwrap();
    let g2 = b.mutex(&name).unwrap().try_lock().unwrap().expect("free");
    assert!(g2.token() > t);
    g2.release().unwrap();
}

#[test]
fn cluster_blackholed_keep_alive_loses_before_another_acquires_fault() {
    // A 3-member cluster; the holder reaches it only through a proxy to one
    // member, which then drops everything on the floor.
    let cluster = EtcdCluster::start();
    let proxy = integration::Proxy::start(cluster.member(0).client_addr());
    let name = lock_name("cluster-blackhole");
    let holder = EtcdClient::builder([format!("http://{}", proxy.addr())])
        .ttl(SHORT_TTL)
        .connect()
        .unwrap();
    let held = holder.mutex(&name).unwrap().lock().unwrap();
    let other = EtcdClient::builder(cluster.endpoints())
        .ttl(Duration::from_secs(10))
        .connect()
        .unwrap()
        .mutex(&name)
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let taker = std::thread::spawn(move || {
        let g = other.lock().expect("the other client acquires");
        tx.send(BootInstant::now()).unwrap();
        g
    });
    proxy.blackhole();
    held.lost()
        .wait_timeout(scale(Duration::from_secs(10)))
        .expect("the black-holed holder's signal fires");
    let valid_until = held.valid_until().expect("a deadline");
    let taken_at = rx
        .recv_timeout(scale(Duration::from_secs(15)))
        .expect("the other client acquires after the lease ends");
    assert!(
        valid_until <= taken_at,
        "valid_until {valid_until:?} passed only after the other acquired at {taken_at:?}"
    );
    let new = taker.join().unwrap();
    assert!(new.token() > held.token());
    proxy.restore();
}

/// A waiter whose watch stream breaks while the lock is released: its
/// client's watches resume where they stopped when the stream re-opens,
/// and the waiter acquires. With the history compacted meanwhile, the
/// resumed watch cannot replay the release: the waiter reads again
/// instead, and acquires all the same.
fn a_waiter_behind_a_broken_stream_acquires(compact: bool) {
    let server = EtcdServer::start();
    let facts = server.facts();
    let proxy = integration::Proxy::start(server.client_addr());
    let name = lock_name("resume");
    let a = connect(&server);
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let b = EtcdClient::builder([proxy.addr().to_string()])
        .ttl(Duration::from_secs(30))
        .connect()
        .unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    // Both clients watch the name: the holder's and the waiter's.
    wait_until("both clients watch the name", scale(SOON), || {
        server.metric("etcd_debugging_mvcc_watcher_total") >= 2.0
    });
    proxy.blackhole();
    proxy.drop_connections();
    let first = held.token();
    held.release().unwrap();
    if compact {
        facts.put(&format!("{name}-after"), b"x");
        let rev = store_revision(&facts);
        let mut raw = facts.client();
        block_on(async move { raw.compact(rev, None).await }).expect("compact");
    }
    assert!(
        !waiter.is_finished(),
        "the waiter cannot hear the release yet"
    );
    proxy.restore();
    let (token, _, g) = wait_for_join(waiter);
    assert!(token > first, "{token:?} after {first:?}");
    g.release().unwrap();
    assert!(facts.keys_with_prefix(&format!("{name}/")).is_empty());
}

/// Joins a waiter within [`SOON`] (scaled), or fails the test.
fn wait_for_join(
    waiter: std::thread::JoinHandle<Waited>,
) -> (
    recipes_core::FencingToken,
    BootInstant,
    recipes_etcd::MutexGuard,
) {
    wait_until("the waiter acquires", scale(SOON), || waiter.is_finished());
    waiter.join().unwrap().expect("the waiter acquires")
}

#[test]
fn a_waiter_behind_a_broken_watch_stream_acquires_fault() {
    a_waiter_behind_a_broken_stream_acquires(false);
}

#[test]
fn a_waiter_behind_a_broken_watch_stream_over_compacted_history_acquires_fault() {
    a_waiter_behind_a_broken_stream_acquires(true);
}

/// A stream break in a quiet store (nothing written since the last
/// revision the watches heard): the resumed watches vouch for the reads
/// made after it, so the holder and the waiter read once each and go back
/// to waiting, instead of reading again and again until someone writes.
#[test]
fn a_broken_stream_in_a_quiet_store_costs_a_read_not_a_spin_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let proxy = integration::Proxy::start(server.client_addr());
    let through = || {
        EtcdClient::builder([proxy.addr().to_string()])
            .ttl(Duration::from_secs(30))
            .connect()
            .unwrap()
    };
    let name = lock_name("quiet");
    let (a, b) = (through(), through());
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    wait_until("both clients watch the name", scale(SOON), || {
        server.metric("etcd_debugging_mvcc_watcher_total") >= 2.0
    });
    let revision = store_revision(&facts);
    let ranges = || server.metric("etcd_debugging_mvcc_range_total");
    let (accepted, read_before) = (proxy.accepted_count(), ranges());
    proxy.drop_connections();
    // Both clients connected again, each read again after the break (the
    // holder its key, the waiter the queue), and both watch again: the
    // window below starts after the break, not before it.
    wait_until("both watch again", scale(SOON), || {
        proxy.accepted_count() >= accepted + 2
            && ranges() >= read_before + 2.0
            && server.metric("etcd_debugging_mvcc_watcher_total") >= 2.0
    });
    let before = ranges();
    // The window observed, not a synchronization: reads in a second.
    std::thread::sleep(Duration::from_secs(1));
    let read = ranges() - before;
    assert_eq!(store_revision(&facts), revision, "nothing was written");
    assert!(read < 20.0, "{read} reads in a second of a quiet store");
    assert!(!waiter.is_finished(), "the waiter still waits");
    assert!(held.lost().reason().is_none(), "the holder still holds");
    let first = held.token();
    held.release().unwrap();
    let (token, _, g) = wait_for_join(waiter);
    assert!(token > first, "{token:?} after {first:?}");
    g.release().unwrap();
}

/// etcd 3.4.23 (etcd-io/etcd#18089): a watch resumed at the revision a
/// compaction named is neither sent a deletion at exactly that revision
/// nor told that history was compacted. A holder whose key was deleted
/// then, while its watch stream was down, must still learn it lost.
#[test]
fn a_holder_whose_key_goes_at_the_compacted_revision_while_its_stream_is_down_loses_fault() {
    let server = EtcdServer::start();
    let facts = server.facts();
    let proxy = integration::Proxy::start(server.client_addr());
    let name = lock_name("compacted-at");
    let a = EtcdClient::builder([proxy.addr().to_string()])
        .ttl(Duration::from_secs(30))
        .connect()
        .unwrap();
    let held = a.mutex(&name).unwrap().lock().unwrap();
    let key = key_of(&a, &name);
    wait_until("the holder watches its key", scale(SOON), || {
        server.metric("etcd_debugging_mvcc_watcher_total") >= 1.0
    });
    let before = store_revision(&facts);
    proxy.blackhole();
    proxy.drop_connections();
    facts.delete(&key);
    let deleted_at = store_revision(&facts);
    assert_eq!(deleted_at, before + 1, "the deletion is the next revision");
    let mut raw = facts.client();
    block_on(async move { raw.compact(deleted_at, None).await }).expect("compact");
    assert!(held.lost().reason().is_none(), "not heard yet");
    proxy.restore();
    wait_until("the holder hears it lost", scale(SOON), || {
        held.lost().reason().is_some()
    });
    drop(held);
    a.close().unwrap();
}

/// The raw fenced transaction of a held key, sent to a server that does
/// not answer, is `Indeterminate` (it may be applied once the server
/// answers again), not a retryable `Timeout` a caller would send again.
#[test]
fn a_raw_fenced_transaction_without_a_reply_is_indeterminate_fault() {
    let server = EtcdServer::start();
    let a = EtcdClient::builder(server.endpoints())
        .ttl(Duration::from_secs(30))
        .rpc_timeout(Duration::from_secs(1))
        .connect()
        .unwrap();
    let name = lock_name("raw-txn");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    server.pause();
    let put = etcd_client::TxnOp::put(format!("{name}-x"), "1", None);
    let r = g.lease().entry().txn(vec![put]);
    server.resume();
    assert!(matches!(r, Err(Error::Indeterminate { .. })), "{r:?}");
    g.release().unwrap();
    a.close().unwrap();
}

/// A lease revoked by hand (`etcdctl lease revoke`) before the keep-alive
/// says so: the next acquisition's put with it fails "requested lease not
/// found"; the session is then lost, and the acquisition starts over on a
/// new lease instead of failing with the server's raw text.
#[test]
fn an_acquisition_on_a_lease_revoked_by_hand_starts_over_on_a_new_one_fault() {
    let server = EtcdServer::start();
    let a = connect_with_ttl(&server, Duration::from_secs(30));
    let name = lock_name("revoked");
    let first = a.mutex(&name).unwrap().lock().unwrap();
    let lease = a.session_id().unwrap();
    first.release().unwrap();
    let mut etcd = server.facts().client();
    block_on(etcd.lease_revoke(lease)).expect("revoked");
    let g = a
        .mutex(&name)
        .unwrap()
        .try_lock_for(scale(Duration::from_secs(5)))
        .expect("no error: the acquisition starts over")
        .expect("free");
    let now = a.session_id().unwrap();
    assert_ne!(now, lease, "a new lease");
    g.release().unwrap();
    a.close().unwrap();
}

/// A key of our lease's name put by someone else without the lease (by
/// hand, `etcdctl put <name>/<lease hex> ""`) is taken over on our lease
/// when we lock: it goes with our session, not never.
#[test]
fn a_key_of_our_name_put_without_our_lease_goes_with_our_session_fault() {
    let server = EtcdServer::start();
    let a = connect_with_ttl(&server, Duration::from_secs(2));
    let name = lock_name("stray");
    let lease = a.session_id().unwrap();
    let key = format!("{name}/{lease:x}");
    server.facts().put(&key, b"");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    a.orphan();
    server
        .facts()
        .wait_gone(&key, scale(Duration::from_secs(10)));
    drop(g);
}
