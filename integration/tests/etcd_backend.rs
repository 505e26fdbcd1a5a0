//! The etcd backend's session and mutex against real etcd 3.4.
//!
//! Tests that do not break the server share one (`EtcdServer::shared`) and
//! use their own lock names. Tests that pause, kill or restart a server, or
//! that wait for a lease to expire, are named `*_fault` (nextest runs them
//! one at a time) and start their own server when they break it.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use integration::runtime::{block_on, block_on_timeout};
use integration::{
    scale, wait_for, wait_until, wait_until_with, EtcdCluster, EtcdConfig, EtcdFacts, EtcdServer,
};
use recipes_core::{
    margin, BootInstant, Error, FenceGate, FencingToken, LossReason, DEFAULT_SLACK,
};
use recipes_etcd::etcd_client::WatchOptions;
use recipes_etcd::{EtcdClient, MutexGuard};

/// The store's current revision, as a read's header says.
fn store_revision(facts: &EtcdFacts) -> i64 {
    let mut client = facts.client();
    block_on(async move { client.get("/", None).await })
        .expect("read the store revision")
        .header()
        .expect("a header")
        .revision()
}

/// What a waiter thread returns: its guard, token and when it acquired.
type Waited = recipes_core::Result<(FencingToken, BootInstant, MutexGuard)>;

/// `client` starts waiting for `name` (held by someone else) in a thread;
/// returns once the waiter's key is in etcd, behind the holder's.
fn queue_waiter(facts: &EtcdFacts, client: &EtcdClient, name: &str) -> JoinHandle<Waited> {
    let m = client.mutex(name).unwrap();
    let waiter = std::thread::spawn(move || m.lock().map(|g| (g.token(), BootInstant::now(), g)));
    wait_keys(facts, name, 2);
    assert!(!waiter.is_finished(), "waits while the lock is held");
    waiter
}

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

/// The lease a contender key `<name>/<lease hex>` is bound to.
fn lease_of(key: &str) -> i64 {
    let hex = key.rsplit('/').next().expect("a key with a '/'");
    u64::from_str_radix(hex, 16).expect("a lease id in hex") as i64
}

/// The keys put or deleted under `<name>/` after revision `after`: a watch
/// from `after + 1` replays the history up to a marker key put last.
fn changes_since(facts: &EtcdFacts, name: &str, after: i64) -> Vec<String> {
    let mut client = facts.client();
    let prefix = format!("{name}/");
    let marker = format!("{name}/~marker/end");
    let changes = block_on_timeout(scale(Duration::from_secs(10)), async {
        client.put(marker.as_str(), "", None).await?;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1);
        let mut stream = client.watch(prefix.as_str(), Some(options)).await?;
        let mut seen = Vec::new();
        while let Some(reply) = stream.message().await? {
            for event in reply.events() {
                let key = event
                    .kv()
                    .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                    .unwrap_or_default();
                if key == marker {
                    client.delete(marker.as_str(), None).await?;
                    return Ok(seen);
                }
                seen.push(key);
            }
        }
        Ok::<_, recipes_etcd::etcd_client::Error>(seen)
    });
    changes
        .expect("the watch replays up to the marker in time")
        .expect("watch the history")
}

#[test]
fn two_handles_of_one_name_in_one_client_contend_on_two_leases() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("two-handles");
    let (m1, m2) = (a.mutex(&name).unwrap(), a.mutex(&name).unwrap());
    let primary = a.session_id().unwrap();
    let g1 = m1.lock().unwrap();
    assert_eq!(g1.lease().session_id(), primary, "the client's own lease");

    // The second handle contends in etcd, on another lease, and times out.
    assert!(m2
        .try_lock_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let left = facts.wait_keys(
        &format!("{name}/"),
        "only g1's",
        Duration::from_secs(5),
        |k| k.len() == 1,
    );
    assert_eq!(
        left,
        vec![g1.holder().to_owned()],
        "the timed-out try left no key"
    );

    // While it waits its key exists, bound to a lease that is not g1's.
    let waiter = std::thread::spawn(move || m2.lock().map(|g| (g, m2)));
    let both = wait_keys(&facts, &name, 2);
    assert!(both.contains(&g1.holder().to_owned()), "{both:?}");
    let other = both.iter().find(|k| *k != g1.holder()).unwrap().clone();
    let single_use = lease_of(&other);
    assert_ne!(single_use, primary, "two holders are never one identity");
    assert!(facts.lease_time_to_live(single_use) > 0, "a live lease");
    assert!(!waiter.is_finished(), "waits while g1 holds");
    assert_eq!(
        a.session_id(),
        Some(primary),
        "the client's lease is unchanged"
    );

    let t1 = g1.token();
    g1.release().unwrap();
    let (g2, m2) = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    assert_eq!(g2.holder(), other);
    assert_eq!(g2.lease().session_id(), single_use);

    // A single-use lease goes with its guard; the client's lease serves
    // the next acquisition once it is free for the name, and a contended
    // one gets a new lease of its own.
    let t2 = g2.token();
    g2.release().unwrap();
    assert_eq!(facts.lease_time_to_live(single_use), -1, "revoked with g2");
    let g1 = m1.lock().unwrap();
    assert_eq!(
        g1.lease().session_id(),
        primary,
        "the client's lease was free"
    );
    assert!(g1.token() > t2);
    let waiter = std::thread::spawn(move || m2.lock());
    let both = wait_keys(&facts, &name, 2);
    let other = both.iter().find(|k| *k != g1.holder()).unwrap().clone();
    let next = lease_of(&other);
    assert!(
        next != primary && next != single_use,
        "a new lease: {both:?}"
    );
    let t3 = g1.token();
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t3);
    assert_eq!(g2.lease().session_id(), next);
    drop(g2);
    wait_until(
        "dropping the guard revokes its lease",
        Duration::from_secs(5),
        || facts.lease_time_to_live(next) == -1,
    );
    assert!(keys(&facts, &name).is_empty());
}

#[test]
fn one_handle_shared_by_threads_queues_them_locally() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("shared-handle");
    let m = Arc::new(a.mutex(&name).unwrap());
    let g1 = m.lock().unwrap();
    let before = store_revision(&facts);

    // A timed wait of another thread on the same handle: no key, no write.
    let other = m.clone();
    let timed = std::thread::spawn(move || other.try_lock_for(Duration::from_millis(300)));
    assert!(timed.join().unwrap().unwrap().is_none(), "g1 holds");
    assert_eq!(
        changes_since(&facts, &name, before),
        Vec::<String>::new(),
        "the waiting thread wrote nothing to etcd"
    );
    assert_eq!(keys(&facts, &name), vec![g1.holder().to_owned()]);

    // An unbounded one gets the lock once g1 is released.
    let (started, has_started) = crossbeam_channel::bounded(1);
    let other = m.clone();
    let waiter = std::thread::spawn(move || {
        started.send(()).unwrap();
        other.lock()
    });
    has_started.recv().unwrap();
    assert_eq!(keys(&facts, &name), vec![g1.holder().to_owned()], "one key");
    assert!(!waiter.is_finished(), "waits while g1 holds");
    let t1 = g1.token();
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    assert_eq!(
        g2.lease().session_id(),
        a.session_id().unwrap(),
        "no pooled lease"
    );
    assert_eq!(keys(&facts, &name), vec![g2.holder().to_owned()]);
    g2.release().unwrap();
}

#[test]
fn close_revokes_the_pooled_leases() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect(server);
    let name = lock_name("pool-close");
    let (m1, m2) = (a.mutex(&name).unwrap(), a.mutex(&name).unwrap());
    let primary = a.session_id().unwrap();
    let g1 = m1.lock().unwrap();
    let waiter = std::thread::spawn(move || m2.lock());
    wait_keys(&facts, &name, 2);
    g1.release().unwrap();
    let g2 = waiter.join().unwrap().unwrap();
    let pooled = g2.lease().session_id();
    assert_ne!(pooled, primary);
    assert!(facts.lease_time_to_live(pooled) > 0);

    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(facts.lease_time_to_live(pooled), -1, "the pooled lease");
    assert_eq!(facts.lease_time_to_live(primary), -1, "the client's lease");
    assert_eq!(
        g2.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Closed)
    );
    assert!(keys(&facts, &name).is_empty());
}

#[test]
fn bad_names_and_settings_are_invalid_arguments() {
    let server = EtcdServer::shared();
    let a = connect(server);
    for bad in [
        "",
        "locks/x",
        "/locks/x/",
        "/",
        "/a//b",
        "/a\nb",
        "/a\u{7f}",
    ] {
        match a.mutex(bad) {
            Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty()),
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    for ttl in [Duration::ZERO, Duration::from_secs(9_000_000_001)] {
        match EtcdClient::builder(server.endpoints()).ttl(ttl).connect() {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("TTL"), "{msg}"),
            other => panic!("TTL {ttl:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn the_session_reports_its_lease() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let a = connect_with_ttl(server, Duration::from_millis(2500));
    assert_eq!(
        a.granted_ttl(),
        Duration::from_secs(3),
        "rounded up to whole seconds"
    );
    let lease = a.session_id().unwrap();
    let ttl = facts.lease_time_to_live(lease);
    assert!((1..=3).contains(&ttl), "server TTL {ttl}");
    // Keep-alives renew it: the deadline moves forward.
    let first = a.valid_until().unwrap();
    wait_until(
        "a keep-alive moves the deadline",
        Duration::from_secs(5),
        || a.valid_until().unwrap() > first,
    );
    assert!(a.valid_until().unwrap() <= BootInstant::now() + Duration::from_secs(3));
    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(
        facts.lease_time_to_live(lease),
        -1,
        "close revokes the lease"
    );
}

#[test]
fn close_revokes_the_lease_and_frees_the_lock() {
    let server = EtcdServer::shared();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("close");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&server.facts(), &b, &name);
    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(
        g.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Closed)
    );
    assert!(waiter.join().unwrap().unwrap().0 > g.token());
    assert!(matches!(
        a.mutex(&name).unwrap().try_lock(),
        Err(Error::Closed)
    ));
}

#[test]
fn a_revoked_lease_fires_loss_frees_others_and_is_replaced() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = lock_name("revoked");
    let g = a.mutex(&name).unwrap().lock().unwrap();
    let waiter = queue_waiter(&facts, &b, &name);
    let lease = a.session_id().unwrap();
    let mut raw = facts.client();
    block_on(async move { raw.lease_revoke(lease).await }).unwrap();
    let reason = g.lost().wait_timeout(scale(Duration::from_secs(5)));
    assert!(
        matches!(reason, Some(LossReason::Deleted | LossReason::Revoked)),
        "{reason:?}"
    );
    assert!(waiter.join().unwrap().unwrap().0 > g.token());
    assert!(matches!(
        g.put(&format!("{name}-x"), b"x"),
        Err(Error::FenceRejected { .. })
    ));
    // The keep-alive stream hears of it; the next acquisition gets a new lease.
    wait_until("a sees its lease gone", Duration::from_secs(10), || {
        a.is_session_lost()
    });
    let g2 = a
        .mutex(&name)
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("free");
    assert_ne!(a.session_id(), Some(lease));
    assert_eq!(g2.holder(), format!("{name}/{:x}", a.session_id().unwrap()));
    g2.release().unwrap();
}

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

#[test]
fn a_ttl_below_the_server_minimum_is_raised_and_reported() {
    let config = EtcdConfig::default()
        .with_election(Duration::from_millis(100), Duration::from_millis(1500));
    let min = config.min_lease_ttl();
    assert_eq!(min, Duration::from_secs(3));
    let server = EtcdServer::start_with(config);
    let a = connect_with_ttl(&server, Duration::from_secs(1));
    assert_eq!(a.granted_ttl(), min);
    let g = a.mutex(&lock_name("min-ttl")).unwrap().lock().unwrap();
    // The deadline is computed from what was granted.
    assert!(g.valid_until().unwrap() > BootInstant::now() + Duration::from_millis(1500));
    g.release().unwrap();
}

/// `etcdctl lock` (Go's concurrency.Mutex) and ours contend for one lock
/// and share one increasing fence sequence; both fences are the revision at
/// which ownership was confirmed.
#[test]
fn etcdctl_lock_contends_with_ours() {
    // Its own server: nothing else writes, so each fence can be compared
    // with the store's revision right after the hand-over.
    let server = EtcdServer::start();
    let facts = server.facts();
    let dir = integration::test_dir::TestDir::new("etcdctl-lock");
    let name = lock_name("etcdctl");
    let clients: Vec<_> = (0..2).map(|_| connect(&server)).collect();
    let mut fences: Vec<(String, i64)> = Vec::new();

    let mut ours = Some(clients[0].mutex(&name).unwrap().lock().unwrap());
    fences.push(("ours".into(), ours.as_ref().unwrap().token().get() as i64));
    assert_eq!(fences[0].1, store_revision(&facts));
    for round in 0..3 {
        // etcdctl waits while we hold.
        let mut ctl = Etcdctl::lock(&server, &name, dir.path(), round);
        wait_keys(&facts, &name, 2);
        assert!(
            ctl.rev(Duration::ZERO).is_none(),
            "etcdctl must wait while we hold"
        );
        ours.take().unwrap().release().unwrap();
        let rev = ctl
            .rev(scale(Duration::from_secs(10)))
            .expect("etcdctl acquires");
        assert_eq!(
            rev,
            store_revision(&facts),
            "ETCD_LOCK_REV is the confirming read's revision"
        );
        fences.push(("etcdctl".into(), rev));
        // Ours waits while etcdctl holds.
        let m = clients[round % 2].mutex(&name).unwrap();
        let waiter = std::thread::spawn(move || m.lock());
        wait_keys(&facts, &name, 2);
        assert!(!waiter.is_finished(), "we must wait while etcdctl holds");
        ctl.unlock();
        let g = waiter.join().unwrap().unwrap();
        assert_eq!(g.token().get() as i64, store_revision(&facts));
        fences.push(("ours".into(), g.token().get() as i64));
        ours = Some(g);
    }
    ours.take().unwrap().release().unwrap();
    println!("fence sequence: {fences:?}");
    assert!(
        fences.windows(2).all(|w| w[0].1 < w[1].1),
        "one strictly increasing sequence: {fences:?}"
    );
}

/// `etcdctl lock <name> sh -c …`: prints `ETCD_LOCK_REV`, then holds the
/// lock until the test writes to a fifo.
struct Etcdctl {
    child: Child,
    lines: crossbeam_channel::Receiver<String>,
    fifo: std::path::PathBuf,
}

impl Etcdctl {
    fn lock(server: &EtcdServer, name: &str, dir: &std::path::Path, round: usize) -> Etcdctl {
        let fifo = dir.join(format!("release-{round}"));
        let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let script = format!("echo REV=$ETCD_LOCK_REV; read x < '{}'", fifo.display());
        let mut child = Command::new("/usr/bin/etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", server.endpoint()))
            .args(["lock", name, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run etcdctl");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Etcdctl { child, lines, fifo }
    }

    /// The `ETCD_LOCK_REV` its command printed, waiting up to `wait`.
    fn rev(&mut self, wait: Duration) -> Option<i64> {
        let line = self.lines.recv_timeout(wait).ok()?;
        Some(line.strip_prefix("REV=").expect(&line).parse().unwrap())
    }

    /// Let its command end: etcdctl then unlocks and exits.
    fn unlock(mut self) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .and_then(|mut f| f.write_all(b"go\n"))
            .expect("write the fifo");
        let status = wait_for("etcdctl exits", Duration::from_secs(10), || {
            self.child.try_wait().unwrap()
        });
        assert!(status.success(), "etcdctl: {status}");
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two or more clients hand one lock back and forth as fast as they can.
/// Each acquisition after the first waits on a synced watch.
#[test]
fn contended_handoff_rate() {
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
        println!("contended acquisitions per second with {contenders} contenders: {rate:.0}");
        // Go's Mutex (a watch from a past revision) manages 30–40/s here.
        let floor = 100.0 / integration::env::slow_factor();
        assert!(rate > floor, "{rate:.0}/s, expected more than {floor:.0}/s");
    }
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
    // Every waiter is queued and watching: its own key and the one ahead.
    wait_keys(&server.facts(), &name, 51);
    wait_until("every waiter watches", Duration::from_secs(20), || {
        watchers(&server) > 2 * 50
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

/// Run `etcdctl` against `server` and insist it succeeds.
fn etcdctl(server: &EtcdServer, args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", server.endpoint()))
        .args(args)
        .output()
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn user_and_password_authenticate_the_client() {
    // Its own server: enabling auth is server-wide.
    let server = EtcdServer::start();
    etcdctl(&server, &["user", "add", "root:rootpw"]);
    etcdctl(&server, &["auth", "enable"]);
    let name = lock_name("auth");
    let client = EtcdClient::builder(server.endpoints())
        .user("root", "rootpw")
        .connect()
        .expect("the right password connects");
    let guard = client.mutex(&name).unwrap().lock().unwrap();
    guard.check().unwrap();
    guard.release().unwrap();
    // Without credentials, or with a wrong password, connect fails (etcd
    // lets anyone grant a lease; the connect's read proves the credentials).
    let anonymous = EtcdClient::builder(server.endpoints()).connect();
    assert!(
        matches!(anonymous, Err(recipes_etcd::Error::Unauthenticated { .. })),
        "no credentials: {anonymous:?}"
    );
    let wrong = EtcdClient::builder(server.endpoints())
        .user("root", "nope")
        .connect();
    assert!(
        matches!(wrong, Err(recipes_etcd::Error::Unauthenticated { .. })),
        "a wrong password: {wrong:?}"
    );
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
