//! The etcd backend's mutex against real etcd 3.4: try, timed and blocking
//! locks, fences across holders, turns in arrival order, nested names, no
//! key left by a failed try, a deleted key's loss, the contended handoff
//! and one wake per release. (The lease session: `etcd_session.rs`;
//! `etcdctl` as a peer: `etcd_interop.rs`.)
//!
//! Tests that do not break the server share one (`EtcdServer::shared`) and
//! use their own lock names; tests that break one are named `*_fault`
//! (nextest runs them one at a time) and start their own.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::runtime::block_on;
use integration::{scale, wait_until, EtcdServer};
use recipes_core::{BootInstant, Error, FenceGate, FencingToken, LossReason};
use recipes_etcd::MutexGuard;

#[test]
fn lock_try_lock_and_timed_lock() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("semantics");
    let (ma, mb) = (a.mutex(&name).unwrap(), b.mutex(&name).unwrap());
    assert_eq!(ma.name(), name);

    let g = ma.lock().unwrap();
    assert_eq!(
        g.holder(),
        format!("{name}/{:x}", a.session_id().unwrap()),
        "the concurrency package's key layout"
    );
    g.check().unwrap();
    assert!(g.valid_until().unwrap() > BootInstant::now());
    assert!(mb.try_lock().unwrap().is_none(), "held by a");
    let started = Instant::now();
    assert!(mb
        .try_lock_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited the timeout"
    );
    assert_eq!(keys(&facts, &name), vec![g.holder().to_owned()]);

    let t1 = g.token();
    g.release().unwrap();
    assert!(
        keys(&facts, &name).is_empty(),
        "release waits for the delete"
    );
    let g2 = mb.try_lock().unwrap().expect("free after release");
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    let g3 = mb
        .try_lock_until(Instant::now() + Duration::from_millis(50))
        .unwrap();
    assert!(g3.is_none(), "same client, same name: queued behind g2");
    drop(g2);
    facts.wait_gone(
        &format!("{name}/{:x}", b.session_id().unwrap()),
        Duration::from_secs(5),
    );
    let g4 = ma
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("free after drop");
    assert!(g4.token() > t1);
    g4.release().unwrap();
}

#[test]
fn fences_strictly_increase_across_holders() {
    let server = EtcdServer::shared();
    let name = lock_name("fences");
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let gate = Arc::new(FenceGate::new());
    let tokens = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let m = c.mutex(&name).unwrap();
            let (gate, tokens, inside) = (gate.clone(), tokens.clone(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let g = m.lock().unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    gate.admit(g.token()).unwrap();
                    tokens.lock().push(g.token());
                    inside.store(false, Ordering::SeqCst);
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = tokens.lock();
    assert_eq!(tokens.len(), 30);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing in acquisition order: {tokens:?}"
    );
}

#[test]
fn a_waiter_acquires_after_release() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("waiter");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    let t1 = g.token();
    g.release().unwrap();
    let (t2, _, g2) = waiter.join().unwrap().unwrap();
    assert!(t2 > t1);
    assert!(!g2.is_lost());
    g2.release().unwrap();
}

/// Closing a client ends an acquisition another thread waits in: its key
/// is gone when `close` returns (the lease was revoked, not left to run
/// out), and the waiting `lock()` returns `Closed`.
#[test]
fn close_ends_a_waiting_acquisition_and_its_key() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("close-waiting");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    let _ = b.close_within(Duration::from_secs(5));
    assert_eq!(
        keys(&facts, &name),
        vec![g.holder().to_owned()],
        "only the holder's key is left once close returned"
    );
    wait_until(
        "the waiting lock() returns",
        Duration::from_secs(10),
        || waiter.is_finished(),
    );
    match waiter.join().unwrap() {
        Err(Error::Closed) => {}
        other => panic!("expected Closed, got {:?}", other.map(|(t, ..)| t)),
    }
    g.release().unwrap();
}

#[test]
fn waiters_take_turns_in_arrival_order() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let name = lock_name("order");
    let holder = connect(server);
    let g = holder.mutex(&name).unwrap().lock().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut threads = Vec::new();
    let clients: Vec<_> = (0..4).map(|_| connect(server)).collect();
    for (i, c) in clients.iter().enumerate() {
        let m = c.mutex(&name).unwrap();
        let tx = tx.clone();
        threads.push(std::thread::spawn(move || {
            let g = m.lock().unwrap();
            tx.send(i).unwrap();
            g.release().unwrap();
        }));
        // The next waiter queues only after this one's key exists.
        wait_keys(&facts, &name, i + 2);
    }
    g.release().unwrap();
    let order: Vec<usize> = (0..4)
        .map(|_| rx.recv_timeout(scale(Duration::from_secs(10))).unwrap())
        .collect();
    assert_eq!(order, vec![0, 1, 2, 3]);
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn nested_names_do_not_block_each_other() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let outer = lock_name("nested");
    let inner = format!("{outer}/b");
    // The inner lock first: its key is older than the outer lock's.
    let gi = b
        .mutex(&inner)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("inner free");
    let go = a
        .mutex(&outer)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("outer free despite an older nested key");
    assert!(b.mutex(&outer).unwrap().try_lock().unwrap().is_none());
    assert!(a.mutex(&inner).unwrap().try_lock().unwrap().is_none());
    go.release().unwrap();
    gi.release().unwrap();

    // More nested keys than one read returns, all older than ours: the
    // ownership read pages past them, in both directions.
    let mut raw = facts.client();
    let nested = outer.clone();
    block_on(async move {
        for i in 0..40 {
            raw.put(format!("{nested}/n{i:02}/k"), "", None)
                .await
                .unwrap();
        }
    });
    let ma = a.mutex(&outer).unwrap();
    let mb = b.mutex(&outer).unwrap();
    let g = ma.try_lock().unwrap().expect("only nested keys are older");
    assert!(mb.try_lock().unwrap().is_none(), "a holds it");
    let waiter = std::thread::spawn(move || mb.lock().map(|g| g.token()));
    wait_until("b waits", Duration::from_secs(10), || {
        keys(&facts, &outer)
            .iter()
            .filter(|k| !k[outer.len() + 1..].contains('/'))
            .count()
            == 2
    });
    let t = g.token();
    g.release().unwrap();
    assert!(waiter.join().unwrap().unwrap() > t);
    let mut raw = facts.client();
    let prefix = format!("{outer}/");
    block_on(async move {
        raw.delete(
            prefix,
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    });
}

#[test]
fn a_timed_out_or_failed_try_leaves_no_key() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("timeout");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let mb = b.mutex(&name).unwrap();
    let b_key = format!("{name}/{:x}", b.session_id().unwrap());
    for wait in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(200),
    ] {
        assert!(mb.try_lock_for(wait).unwrap().is_none());
        facts.wait_gone(&b_key, Duration::from_secs(5));
        assert_eq!(keys(&facts, &name), vec![g.holder().to_owned()]);
    }
    // A waiter whose deadline passes while it waits on a watch.
    let waiter = std::thread::spawn(move || {
        mb.try_lock_for(Duration::from_millis(500))
            .map(|g| g.is_none())
    });
    assert!(waiter.join().unwrap().unwrap());
    facts.wait_gone(&b_key, Duration::from_secs(5));
    g.release().unwrap();
}

#[test]
fn deleting_the_key_fires_loss_and_fenced_writes_are_rejected() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("deleted");
    let data = format!("{name}-data");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let rev = fenced_put(g.lease(), data.as_str(), "one");
    assert!(rev > g.lease().create_revision());
    assert_eq!(facts.get(&data).as_deref(), Some(&b"one"[..]));
    g.delete(&data).unwrap();
    assert!(!facts.exists(&data));

    let mut raw = facts.client();
    let key = g.holder().to_owned();
    block_on(async move { raw.delete(key, None).await }).unwrap();
    assert_eq!(
        g.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Deleted)
    );
    assert!(matches!(
        g.check(),
        Err(Error::LeaseLost {
            reason: LossReason::Deleted
        })
    ));
    match g.put(&data, b"stale") {
        Err(e @ Error::FenceRejected { .. }) => assert!(e.is_terminal()),
        other => panic!("expected FenceRejected, got {other:?}"),
    }
    assert!(!facts.exists(&data), "the stale write was not applied");
    // The client goes on: the session survived, a new acquisition works.
    let g2 = a
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("free");
    assert!(g2.token() > g.token());
    drop(g);
    g2.release().unwrap();
}

/// Two, then four clients hand one lock back and forth as fast as they
/// can: each holder's fence is above its previous one and every holder is
/// admitted by one fence gate (fences increase across all of them). The
/// rate is printed, not asserted.
#[test]
fn contended_handoffs_admit_every_holder_in_fence_order() {
    let server = EtcdServer::shared();
    let name = lock_name("rate");
    let run_for = Duration::from_secs(3);
    for contenders in [2, 4] {
        let clients: Vec<_> = (0..contenders).map(|_| connect(server)).collect();
        let count = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(FenceGate::new());
        let stop_at = Instant::now() + run_for;
        let threads: Vec<_> = clients
            .iter()
            .map(|c| {
                let m = c.mutex(&name).unwrap();
                let (count, gate) = (count.clone(), gate.clone());
                std::thread::spawn(move || {
                    let mut last = FencingToken(0);
                    while Instant::now() < stop_at {
                        let g: MutexGuard = m.lock().unwrap();
                        assert!(g.token() > last);
                        last = g.token();
                        gate.admit(g.token()).unwrap();
                        count.fetch_add(1, Ordering::Relaxed);
                        g.release().unwrap();
                    }
                })
            })
            .collect();
        let started = Instant::now();
        for t in threads {
            t.join().unwrap();
        }
        let rate = count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
        // A figure to read, not a bound: timings belong in the benchmark
        // (`bench`, docs/benchmarks.md), not in a pass/fail test.
        println!("contended acquisitions per second with {contenders} contenders: {rate:.0}");
        assert!(count.load(Ordering::Relaxed) > 0, "nobody acquired");
    }
}

/// The store's read and transaction counters (`/metrics`).
fn requests_served(server: &EtcdServer) -> u64 {
    (server.metric("etcd_mvcc_range_total") + server.metric("etcd_mvcc_txn_total")) as u64
}

fn watchers(server: &EtcdServer) -> u64 {
    server.metric("etcd_debugging_mvcc_watcher_total") as u64
}

#[test]
fn no_herd_one_release_wakes_one_waiter() {
    // Its own server, so the counters see only this test.
    let server = EtcdServer::start();
    let name = lock_name("herd");
    let holder = connect(&server).mutex(&name).unwrap().lock().unwrap();
    let acquired = Arc::new(AtomicU64::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let m = connect(&server).mutex(&name).unwrap();
            let (acquired, go) = (acquired.clone(), go_rx.clone());
            std::thread::spawn(move || {
                let g = m.lock().unwrap();
                acquired.fetch_add(1, Ordering::SeqCst);
                let _ = go.recv();
                g.release().unwrap();
            })
        })
        .collect();
    // Every waiter is queued and its client watches the name: one watch
    // per client (the holder's and each waiter's), whatever waits on it.
    wait_keys(&server.facts(), &name, 51);
    wait_until("every waiter watches", Duration::from_secs(20), || {
        watchers(&server) > 50
    });
    let before = requests_served(&server);
    holder.release().unwrap();
    wait_until("one waiter acquired", Duration::from_secs(10), || {
        acquired.load(Ordering::SeqCst) == 1
    });
    let served = requests_served(&server) - before;
    eprintln!("herd: {served} reads and txns after one release");
    // The release, the woken waiter's confirming read and its own
    // bookkeeping: a handful, not one read per waiter.
    assert!(served <= 8, "{served} reads and txns after one release");
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    drop(go_tx);
    for w in waiters {
        w.join().unwrap();
    }
}
