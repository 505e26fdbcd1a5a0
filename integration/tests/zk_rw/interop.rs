//! Our read-write lock and Curator 5.4's `InterProcessReadWriteLock` on one
//! path (the Curator peer's `rwlock` and `rwrelease` requests): readers
//! share across libraries, each side's writer excludes the other's reader
//! and writer, and our downgrade — a reader put in the writer's place by
//! one multi — keeps a queued Curator writer out while a queued Curator
//! reader enters. Exclusion is checked as in `zk_interop.rs`: a timed
//! acquire on the other side times out while one side holds, and a queued
//! waiter that acquires checks a flag set just before the holder releases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use integration::peers::CuratorPeer;
use integration::{scale, wait_until, ZkServer};
use recipes_core::Client as _;
use recipes_zk::{RwLock, ZkClient};

use crate::watched_by_another;
use crate::zk_peers::{Case, ACQUIRE, EXCLUDED, SESSION};

fn ours(path: &str) -> RwLock {
    ZkClient::builder(Case::connect())
        .session_timeout(SESSION)
        .connect()
        .expect("connect our client")
        .rw_lock(path)
        .expect("our read-write lock")
}

/// `rwlock <path> <side> <wait>`: whether Curator acquired that side.
fn curator_takes(peer: &mut CuratorPeer, path: &str, side: &str, wait: Duration) -> bool {
    let request = format!("rwlock {path} {side} {}", wait.as_millis());
    match peer.ok(&request, wait + Duration::from_secs(10)).as_str() {
        "acquired" => true,
        "timeout" => false,
        other => panic!("{request:?} answered {other:?}{}", peer.log_tail()),
    }
}

fn curator_releases(peer: &mut CuratorPeer, side: &str) {
    peer.ok(&format!("rwrelease {side}"), Duration::from_secs(10));
}

#[test]
fn curator_and_our_readers_share_and_keep_writers_out() {
    let case = Case::new("rw-readers");
    let path = &case.path;
    let mut curator = case.curator("reader");
    let (a, b) = (ours(path), ours(path));

    assert!(curator_takes(&mut curator, path, "read", ACQUIRE));
    let r = a
        .try_read_for(ACQUIRE)
        .unwrap()
        .expect("ours reads beside Curator's reader");
    assert!(
        b.try_write_for(EXCLUDED).unwrap().is_none(),
        "our writer waits for both readers"
    );
    assert!(
        !curator_takes(&mut curator, path, "write", EXCLUDED),
        "Curator's writer waits for both readers"
    );
    case.wait_contenders(path, 2, "lose the timed-out writers' nodes");
    curator_releases(&mut curator, "read");
    assert!(b.try_write().unwrap().is_none(), "our reader still holds");
    r.release().unwrap();
    b.try_write().unwrap().expect("free").release().unwrap();
    curator.exit();
}

#[test]
fn a_curator_writer_excludes_our_reader_and_writer() {
    let case = Case::new("rw-curator-writes");
    let path = &case.path;
    let mut curator = case.curator("writer");
    let (a, b) = (ours(path), ours(path));

    assert!(curator_takes(&mut curator, path, "write", ACQUIRE));
    assert!(a.try_read_for(EXCLUDED).unwrap().is_none(), "no reader");
    assert!(b.try_write_for(EXCLUDED).unwrap().is_none(), "no writer");
    case.wait_contenders(path, 1, "lose our timed-out nodes");

    let releasing = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let r = a.try_read_for(ACQUIRE * 2).unwrap();
            assert!(
                releasing.load(Ordering::SeqCst),
                "ours read while Curator wrote"
            );
            r
        });
        case.wait_contenders(path, 2, "have our reader queued");
        releasing.store(true, Ordering::SeqCst);
        curator_releases(&mut curator, "write");
        reader.join().unwrap()
    });
    let r = r.expect("our reader enters once Curator's writer left");
    assert!(
        !curator_takes(&mut curator, path, "write", EXCLUDED),
        "Curator's writer waits for our reader"
    );
    assert!(
        curator_takes(&mut curator, path, "read", ACQUIRE),
        "Curator's reader shares with ours"
    );
    r.release().unwrap();
    curator_releases(&mut curator, "read");
    curator.exit();
}

#[test]
fn our_writer_excludes_a_curator_reader_and_writer() {
    let case = Case::new("rw-ours-writes");
    let path = &case.path;
    let mut curator = case.curator("waiter");
    let w = ours(path).write().unwrap();

    assert!(!curator_takes(&mut curator, path, "read", EXCLUDED));
    assert!(!curator_takes(&mut curator, path, "write", EXCLUDED));
    case.wait_contenders(path, 1, "lose Curator's timed-out nodes");

    let releasing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let took = curator_takes(&mut curator, path, "read", ACQUIRE * 2);
            assert!(
                !took || releasing.load(Ordering::SeqCst),
                "Curator read while ours wrote"
            );
            took
        });
        case.wait_contenders(path, 2, "have Curator's reader queued");
        releasing.store(true, Ordering::SeqCst);
        w.release().unwrap();
        assert!(reader.join().unwrap(), "Curator reads after our writer");
    });
    curator_releases(&mut curator, "read");
    curator.exit();
}

/// Ours writes; a Curator reader and then a Curator writer queue behind.
/// Our downgrade lets the reader in and keeps the writer out until both
/// readers are gone.
#[test]
fn our_downgrade_lets_a_curator_reader_in_and_keeps_a_curator_writer_out() {
    let case = Case::new("rw-downgrade");
    let path = case.path.clone();
    let (reader, writer) = (case.curator("reader"), case.curator("writer"));
    let w = ours(&path).write().unwrap();
    let token = w.token();

    let readers_gone = AtomicBool::new(false);
    std::thread::scope(|s| {
        let p = path.as_str();
        let queued_reader = s.spawn(move || {
            let mut reader = reader;
            let took = curator_takes(&mut reader, p, "read", ACQUIRE * 2);
            (reader, took)
        });
        case.wait_contenders(p, 2, "have Curator's reader queued");
        let readers_gone = &readers_gone;
        let queued_writer = s.spawn(move || {
            let mut writer = writer;
            let took = curator_takes(&mut writer, p, "write", ACQUIRE * 3);
            assert!(
                !took || readers_gone.load(Ordering::SeqCst),
                "Curator wrote beside a reader"
            );
            (writer, took)
        });
        case.wait_contenders(p, 3, "have Curator's writer queued");

        let r = w.downgrade().expect("downgrade");
        assert_eq!(r.token(), token);
        let (mut reader, took) = queued_reader.join().unwrap();
        assert!(took, "Curator's reader enters beside our downgraded reader");
        assert!(!queued_writer.is_finished(), "Curator's writer waits");
        r.release().unwrap();
        // The writer waits for Curator's reader still: it is ahead of it.
        assert!(!queued_writer.is_finished(), "Curator's writer waits");
        readers_gone.store(true, Ordering::SeqCst);
        curator_releases(&mut reader, "read");
        let (mut writer, took) = queued_writer.join().unwrap();
        assert!(took, "Curator's writer enters after both readers");
        curator_releases(&mut writer, "write");
        reader.exit();
        writer.exit();
    });
}

/// A Curator writer's JVM killed: our queued reader enters once the server
/// expired its session, not before (own server: a fault test).
#[test]
fn fault_a_killed_curator_writer_frees_the_lock_for_our_reader() {
    let case = Case::new("rw-killed");
    let server = ZkServer::start();
    let (path, facts) = (case.path.as_str(), server.facts());
    let mut curator =
        CuratorPeer::start("killed", &server.connect_string(), SESSION, case.dir.path());
    assert!(curator_takes(&mut curator, path, "write", ACQUIRE));
    let reader = ZkClient::builder(server.connect_string())
        .session_timeout(SESSION)
        .connect()
        .unwrap()
        .rw_lock(path)
        .unwrap();
    let killed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let r = reader.try_read_for(scale(SESSION * 5)).unwrap();
            assert!(
                killed.load(Ordering::SeqCst),
                "ours read beside Curator's writer"
            );
            r
        });
        facts.wait_children(path, "our reader queued", scale(SESSION), |c| c.len() == 2);
        let killed_at = Instant::now();
        killed.store(true, Ordering::SeqCst);
        curator.kill();
        let r = waiter.join().unwrap().expect("our reader enters");
        assert!(
            killed_at.elapsed() <= SESSION + scale(Duration::from_secs(3)),
            "entered {:?} after the kill (session {SESSION:?})",
            killed_at.elapsed()
        );
        r.release().unwrap();
    });
    assert!(facts.children(path).is_empty());
}

/// A Curator writer queued right behind our writer watches our writer's
/// node: the downgrade's multi deletes it, so Curator wakes, lists again,
/// finds our reader in the writer's place and waits on it.
#[test]
fn a_curator_writer_right_behind_ours_waits_on_our_downgraded_reader() {
    let case = Case::new("rw-downgrade-next");
    let path = case.path.as_str();
    let mut curator = case.curator("writer");
    let w = ours(path).write().unwrap();
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let queued = s.spawn(|| {
            let took = curator_takes(&mut curator, path, "write", ACQUIRE * 3);
            assert!(
                !took || released.load(Ordering::SeqCst),
                "Curator wrote beside our downgraded reader"
            );
            took
        });
        case.wait_contenders(path, 2, "have Curator's writer queued");
        let r = w.downgrade().expect("downgrade");
        wait_until(
            "Curator's writer watches our reader",
            scale(ACQUIRE),
            || watched_by_another(r.holder()),
        );
        assert!(!queued.is_finished(), "Curator's writer waits");
        released.store(true, Ordering::SeqCst);
        r.release().unwrap();
        assert!(queued.join().unwrap(), "Curator writes after our reader");
    });
    curator_releases(&mut curator, "write");
    curator.exit();
}
