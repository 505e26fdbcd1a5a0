//! The etcd semaphore against real etcd 3.4: at most N permits under
//! churn, try and timed acquires, a freed permit admitting a waiter, a size
//! mismatch refused, no key left by a timed-out acquire, a deleted permit's
//! loss, a closed client's permits. (Faults: `etcd_semaphore_faults.rs`.)
//!
//! The tests share one server (`EtcdServer::shared`) and use their own
//! semaphore names.

mod etcd_common;

use etcd_common::*;
use recipes_core::Client as _;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{scale, wait_until, EtcdServer};
use recipes_core::{BootInstant, Error, LossReason};

#[test]
fn at_most_n_permits_are_held_under_churn() {
    const N: u32 = 3;
    const ROUNDS: usize = 10;
    let server = EtcdServer::shared();
    let facts = server.facts();
    let name = sem_name("churn");
    let clients: Vec<_> = (0..3).map(|_| connect(server)).collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    // Two threads per client: one client's permits need distinct keys.
    let threads: Vec<_> = clients
        .iter()
        .flat_map(|c| [c.clone(), c.clone()])
        .enumerate()
        .map(|(i, c)| {
            let sem = c.semaphore(&name, N).unwrap();
            let (inside, most, admitted, entered) = (
                inside.clone(),
                most.clone(),
                admitted.clone(),
                entered.clone(),
            );
            let data = format!("{name}-data-{i}");
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let p = sem
                        .try_acquire_for(scale(Duration::from_secs(30)))
                        .unwrap()
                        .expect("admitted within the bound");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= N as usize, "{now} holders of {N} permits");
                    // Work: a fenced write, and a little time inside.
                    p.put(&data, round.to_string().as_bytes()).unwrap();
                    if entered.fetch_add(1, Ordering::SeqCst) < N as usize {
                        // The first N holders stay until all N have entered:
                        // the limit is reached for certain, with waiters
                        // queued. A count that only grows: waiting for
                        // `inside == N` could miss its moment and wait for
                        // holders that have all finished.
                        wait_until("N holders at once", PROMPTLY, || {
                            entered.load(Ordering::SeqCst) >= N as usize
                        });
                    } else {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::SeqCst);
                    p.release().unwrap();
                }
            })
        })
        .collect();
    timed("6 threads x 10 rounds", || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert_eq!(admitted.load(Ordering::SeqCst), 6 * ROUNDS);
    assert_eq!(
        most.load(Ordering::SeqCst),
        N as usize,
        "the limit was reached"
    );
    wait_lease_count(&facts, &name, 0);
    wait_lock_count(&facts, &name, 0);
    assert_eq!(
        facts.get(&format!("{name}/config")).as_deref(),
        Some(&b"3"[..])
    );
}

#[test]
fn try_and_timed_acquire() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = sem_name("semantics");
    let (sa, sb) = (
        a.semaphore(&name, 2).unwrap(),
        b.semaphore(&name, 2).unwrap(),
    );
    assert_eq!(sa.name(), name);
    assert_eq!(sa.permits(), 2);
    let stored = a.read(&format!("{name}/config")).unwrap();
    assert_eq!(
        stored.as_deref(),
        Some(&b"2"[..]),
        "the size in <name>/config"
    );

    let p1 = sa.try_acquire().unwrap().expect("free");
    let p2 = sa
        .try_acquire()
        .unwrap()
        .expect("a second permit, same client");
    let a_prefix = format!("{name}/leases/{:x}-", a.session_id().unwrap());
    for p in [&p1, &p2] {
        assert!(p.holder().starts_with(&a_prefix), "{}", p.holder());
        assert_eq!(p.lease().session_id(), a.session_id().unwrap());
        p.check().unwrap();
        assert!(p.valid_until().unwrap() > BootInstant::now());
    }
    assert_ne!(p1.holder(), p2.holder(), "one key per permit");
    assert!(sb.try_acquire().unwrap().is_none(), "both permits held");
    let started = Instant::now();
    assert!(sb
        .try_acquire_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited the timeout"
    );
    assert!(sb
        .try_acquire_until(Instant::now() + Duration::from_millis(50))
        .unwrap()
        .is_none());
    // The timed-out waiter deleted its permit key before returning.
    let mut held = vec![p1.holder().to_owned(), p2.holder().to_owned()];
    held.sort();
    assert_eq!(lease_keys(&facts, &name), held);

    p1.release().unwrap();
    assert_eq!(
        lease_keys(&facts, &name),
        vec![p2.holder().to_owned()],
        "release waits for the delete"
    );
    let p3 = sb.try_acquire().unwrap().expect("free after release");
    assert!(p3
        .holder()
        .starts_with(&format!("{name}/leases/{:x}-", b.session_id().unwrap())));
    assert!(sa.try_acquire().unwrap().is_none(), "full again");
    drop(p2);
    let p4 = sb
        .try_acquire_for(Duration::from_secs(5))
        .unwrap()
        .expect("free after drop");
    p3.release().unwrap();
    p4.release().unwrap();
    wait_lease_count(&facts, &name, 0);
    wait_lock_count(&facts, &name, 0);
}

#[test]
fn a_freed_permit_admits_a_waiter() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b, c) = (connect(server), connect(server), connect(server));
    let name = sem_name("waiter");
    let sa = a.semaphore(&name, 2).unwrap();
    let (p1, p2) = (sa.acquire().unwrap(), sa.acquire().unwrap());
    let wb = spawn_waiter(b.semaphore(&name, 2).unwrap());
    // b holds the internal mutex and waits with its permit key in place.
    let keys = wait_lease_count(&facts, &name, 3);
    let b_key = keys
        .iter()
        .find(|k| k.contains(&format!("/{:x}-", b.session_id().unwrap())))
        .expect("b's permit key")
        .clone();
    wait_lock_count(&facts, &name, 1);
    // c waits behind b at the internal mutex, without a permit key.
    let wc = spawn_waiter(c.semaphore(&name, 2).unwrap());
    wait_lock_count(&facts, &name, 2);
    assert_eq!(
        lease_keys(&facts, &name).len(),
        3,
        "one waiter's key at most"
    );
    assert!(!wb.is_finished() && !wc.is_finished(), "both wait");

    let t = timed("release to admission", || {
        p1.release().unwrap();
        wb.join().unwrap().unwrap()
    });
    let (_, pb) = t;
    assert_eq!(pb.holder(), b_key, "admitted with the key it waited with");
    assert!(!pb.is_lost());
    // c now waits for a permit: p2 and pb are held.
    wait_lease_count(&facts, &name, 3);
    assert!(!wc.is_finished());
    p2.release().unwrap();
    let (_, pc) = wc.join().unwrap().unwrap();
    pb.release().unwrap();
    pc.release().unwrap();
    wait_lease_count(&facts, &name, 0);
    wait_lock_count(&facts, &name, 0);
}

#[test]
fn a_size_mismatch_is_an_invalid_argument_and_leaves_no_key() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = sem_name("size");
    let config = format!("{name}/config");
    let sa = a.semaphore(&name, 2).unwrap();
    assert_eq!(facts.get(&config).as_deref(), Some(&b"2"[..]));
    let p = sa.acquire().unwrap();
    let before = facts.keys_with_prefix(&format!("{name}/"));

    match b.semaphore(&name, 3) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(
                msg.contains("has 2 permits") && msg.contains("asked for 3"),
                "{msg}"
            );
            assert!(msg.contains("ask for 2"), "says what to change: {msg}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(facts.keys_with_prefix(&format!("{name}/")), before);
    assert_eq!(facts.get(&config).as_deref(), Some(&b"2"[..]));

    // The size changed under a semaphore already made: refused at
    // acquisition, no permit or internal key left.
    put_key(&facts, &config, "5");
    match sa.try_acquire_for(Duration::from_secs(1)) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("has 5 permits"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    wait_lease_keys(&facts, &name, &[p.holder()]);
    wait_lock_count(&facts, &name, 0);
    put_key(&facts, &config, "two");
    match b.semaphore(&name, 2) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("not the size"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // A deleted size is stored again by the next acquisition.
    delete_key(&facts, &config);
    let p2 = sa.try_acquire().unwrap().expect("one permit free");
    assert_eq!(facts.get(&config).as_deref(), Some(&b"2"[..]));

    match a.semaphore(&name, 0) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("at least one"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for bad in ["", "sems/x", "/sems/x/", "/a//b", "/a\nb"] {
        match a.semaphore(bad, 2) {
            Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty()),
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    p.release().unwrap();
    p2.release().unwrap();
}

#[test]
fn a_timed_out_acquire_leaves_no_key() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = sem_name("timeout");
    let p = a.semaphore(&name, 1).unwrap().acquire().unwrap();
    let sb = b.semaphore(&name, 1).unwrap();
    for wait in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(200),
    ] {
        assert!(sb.try_acquire_for(wait).unwrap().is_none());
        wait_lease_keys(&facts, &name, &[p.holder()]);
        wait_lock_count(&facts, &name, 0);
    }
    // A waiter whose deadline passes while it waits on the watch.
    let waiter = std::thread::spawn(move || {
        sb.try_acquire_for(Duration::from_millis(500))
            .map(|p| p.is_none())
    });
    wait_lease_count(&facts, &name, 2);
    assert!(waiter.join().unwrap().unwrap());
    wait_lease_keys(&facts, &name, &[p.holder()]);
    wait_lock_count(&facts, &name, 0);
    p.release().unwrap();
}

#[test]
fn deleting_a_permit_key_fires_its_loss_and_rejects_its_fenced_writes() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b) = (connect(server), connect(server));
    let name = sem_name("deleted");
    let sa = a.semaphore(&name, 2).unwrap();
    let (p1, p2) = (sa.acquire().unwrap(), sa.acquire().unwrap());
    let (d1, d2) = (format!("{name}-data-1"), format!("{name}-data-2"));
    let rev = fenced_put(p1.lease(), d1.as_str(), "one");
    assert!(rev > p1.lease().create_revision());
    assert_eq!(facts.get(&d1).as_deref(), Some(&b"one"[..]));

    delete_key(&facts, p1.holder());
    assert_eq!(
        p1.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Deleted)
    );
    assert!(matches!(
        p1.check(),
        Err(Error::LeaseLost {
            reason: LossReason::Deleted
        })
    ));
    match p1.put(&d1, b"stale") {
        Err(e @ Error::FenceRejected { .. }) => {
            assert!(e.is_terminal());
            assert!(e.to_string().contains(p1.holder()), "{e}");
        }
        other => panic!("expected FenceRejected, got {other:?}"),
    }
    assert!(matches!(p1.delete(&d1), Err(Error::FenceRejected { .. })));
    assert_eq!(
        facts.get(&d1).as_deref(),
        Some(&b"one"[..]),
        "the stale writes were not applied"
    );
    // The other permit of the same client is untouched.
    assert!(!p2.is_lost(), "{:?}", p2.lost().reason());
    p2.put(&d2, b"two").unwrap();
    assert_eq!(facts.get(&d2).as_deref(), Some(&b"two"[..]));
    // The deleted permit's place is free.
    let p3 = b
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire_for(Duration::from_secs(5))
        .unwrap()
        .expect("a place is free");
    drop(p1);
    p2.release().unwrap();
    p3.release().unwrap();
}

#[test]
fn closing_a_client_frees_its_permits_and_ends_its_waits() {
    let server = EtcdServer::shared();
    let facts = server.facts();
    let (a, b, c) = (connect(server), connect(server), connect(server));
    let name = sem_name("close");
    let p = a.semaphore(&name, 1).unwrap().acquire().unwrap();
    let wb = spawn_waiter(b.semaphore(&name, 1).unwrap());
    wait_lease_count(&facts, &name, 2);
    let wc = spawn_waiter(c.semaphore(&name, 1).unwrap());
    wait_lock_count(&facts, &name, 2);
    // An abandoned wait: c's keys go with its lease.
    let c_lease = c.session_id().unwrap();
    let _ = c.close_within(Duration::from_secs(2));
    assert!(matches!(wc.join().unwrap(), Err(Error::Closed)));
    facts.wait_lease_gone(c_lease, PROMPTLY);
    wait_lock_count(&facts, &name, 1);
    let _ = a.close_within(Duration::from_secs(2));
    assert_eq!(
        p.lost().wait_timeout(scale(Duration::from_secs(5))),
        Some(LossReason::Closed)
    );
    let (_, pb) = wb.join().unwrap().unwrap();
    wait_lease_keys(&facts, &name, &[pb.holder()]);
    pb.release().unwrap();
}
