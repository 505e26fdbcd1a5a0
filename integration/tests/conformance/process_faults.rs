//! The read-write lock and the multi-lock held by another OS process (the
//! worker): a killed holder of either side frees it within its lease, a
//! paused holder of either side is fenced out, a killed multi-lock holder frees every
//! name, a paused one is told which lease it lost, and two processes taking
//! the same names in opposite orders never deadlock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::scale;
use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use recipes_core::{Access, BootInstant, Client, FenceGate, LockKind};

use super::{boot, field, name, token_of, Kit};

/// A worker connected with lease `ttl`.
fn worker<K: Kit>(kit: &K, dir: &TestDir, label: &str, ttl: Duration) -> Worker {
    let mut w = Worker::start(&worker_binary(), label, dir.path());
    w.ok(&kit.worker_connect(ttl), Duration::from_secs(15));
    w
}

/// The worker's side name in `rwlock` requests.
fn side(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write => "write",
    }
}

/// A worker holding `held` of a read-write lock is killed; a client waiting
/// for `taker` gets it no earlier than the holder's last acknowledged
/// renewal + the lease and no later than the kill + the lease + slack, with
/// a higher fence when it writes.
pub fn killed_holder_frees_a_side_within_the_lease<K: Kit>(
    kit: &K,
    ttl: Duration,
    held: Access,
    taker: Access,
) {
    let name = name("rw-killed");
    let dir = TestDir::new("rw-killed");
    let mut holder = worker(kit, &dir, "holder", ttl);
    let reply = holder.ok(
        &format!("rwlock {} {name}", side(held)),
        Duration::from_secs(10),
    );
    let granted = kit.granted(ttl);

    let rw = kit.connect(ttl).expect("connect").rw_lock(&name).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let token = match taker {
            Access::Read => rw.read().expect("the reader acquires").token(),
            Access::Write => rw.write().expect("the writer acquires").token(),
        };
        tx.send(BootInstant::now()).unwrap();
        token
    });
    let status = holder.ok("status", Duration::from_secs(5));
    let last_ack = boot(field(&status, "last_ack_ms"));
    let killed_at = BootInstant::now();
    holder.kill();
    let taken_at = rx
        .recv_timeout(scale(granted + Duration::from_secs(10)))
        .expect("the lock was taken over");
    let token = waiter.join().unwrap();
    assert!(token > token_of(&reply), "the new holder's fence is higher");
    // Lower bound: never scaled.
    assert!(
        taken_at >= last_ack + granted,
        "taken {:?} after the last acknowledged renewal, less than the lease {granted:?}",
        taken_at - last_ack
    );
    let slack = kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        taken_at <= killed_at + granted + scale(slack),
        "taken {:?} after the kill; the lease is {granted:?}",
        taken_at - killed_at
    );
}

/// A worker holding `held` (either side) is paused (SIGSTOP) until a
/// writer holds and has written with a higher fence; resumed, it knows it
/// lost, its fenced write and the gate refuse it, and its release leaves
/// the new writer alone.
pub fn paused_holder_is_fenced_out<K: Kit>(kit: &K, ttl: Duration, held: Access) {
    let name = name("rw-paused");
    let resource = format!("{name}-resource");
    let dir = TestDir::new("rw-paused");
    let gate = FenceGate::new();
    let mut old = worker(kit, &dir, "old", ttl);
    let reply = old.ok(
        &format!("rwlock {} {name}", side(held)),
        Duration::from_secs(10),
    );
    let old_token = token_of(&reply);
    old.ok(
        &format!("write {resource} {old_token}"),
        Duration::from_secs(10),
    );
    gate.admit(old_token).unwrap();

    old.pause();
    let rw = kit.connect(ttl).expect("connect").rw_lock(&name).unwrap();
    let new = rw
        .try_write_for(scale(kit.granted(ttl) + Duration::from_secs(10)))
        .unwrap()
        .expect("another writer takes the lock");
    assert!(new.token() > old_token);
    gate.admit(new.token()).unwrap();
    old.resume();

    let status = old.ok("status", Duration::from_secs(10));
    assert_ne!(
        field(&status, "lost"),
        "no",
        "the old writer knows: {status}"
    );
    let refused = old
        .request(
            &format!("write {resource} {old_token}"),
            Duration::from_secs(30),
        )
        .expect_err("the old writer's fenced write is refused");
    assert!(refused.starts_with("fence-rejected"), "{refused}");
    assert!(gate.admit(old_token).is_err(), "the gate refuses it");
    assert_eq!(
        kit.value(&resource).as_deref(),
        Some(old_token.to_string().as_str())
    );
    let _ = old.request("release", Duration::from_secs(30));
    new.check().expect("the new writer still holds");
    assert!(kit.exists(new.holder()), "the new writer's entry survived");
}

/// The names and kinds of a two-name multi-lock, and the worker's spec.
fn parts(a: &str, b: &str) -> ([(String, LockKind); 2], String) {
    (
        [
            (a.to_owned(), LockKind::Mutex),
            (b.to_owned(), LockKind::Write),
        ],
        format!("m:{a},w:{b}"),
    )
}

/// A worker holding a multi-lock (a mutex and a write side) is killed: a
/// client taking the same names gets all of them within the lease, each
/// with a higher fence.
pub fn killed_multi_lock_holder_frees_every_name<K: Kit>(kit: &K, ttl: Duration) {
    let (a, b) = (name("multi-killed-a"), name("multi-killed-b"));
    let (parts, spec) = parts(&a, &b);
    let dir = TestDir::new("multi-killed");
    let mut holder = worker(kit, &dir, "holder", ttl);
    let reply = holder.ok(&format!("multi {spec}"), Duration::from_secs(10));
    let old: Vec<(String, u64)> = field(&reply, "tokens")
        .split(',')
        .map(|nt| {
            let (n, t) = nt.rsplit_once(':').expect("name:token");
            (n.to_owned(), t.parse().expect("token"))
        })
        .collect();
    assert_eq!(old.len(), 2, "{reply}");

    let client = kit.connect(ttl).expect("connect");
    let granted = kit.granted(ttl);
    let killed_at = BootInstant::now();
    holder.kill();
    let refs: Vec<(&str, LockKind)> = parts.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    let guard = client
        .multi_lock_of(&refs)
        .unwrap()
        .try_lock_for(scale(granted + Duration::from_secs(10)))
        .unwrap()
        .expect("every name was freed");
    let taken_at = BootInstant::now();
    for (n, t) in &old {
        let now = guard.token(n).expect("a token per name");
        assert!(
            now.get() > *t,
            "{n}: fence {now} not above the killed holder's {t}"
        );
    }
    let slack = kit.expiry_granularity() + Duration::from_secs(2);
    assert!(
        taken_at <= killed_at + granted + scale(slack),
        "taken {:?} after the kill; the lease is {granted:?}",
        taken_at - killed_at
    );
    guard.release().unwrap();
}

/// A worker holding a multi-lock is paused until another client holds
/// every name; resumed, its loss signal has fired and names a lock.
pub fn paused_multi_lock_holder_is_told_which_name<K: Kit>(kit: &K, ttl: Duration) {
    let (a, b) = (name("multi-paused-a"), name("multi-paused-b"));
    let (parts, spec) = parts(&a, &b);
    let dir = TestDir::new("multi-paused");
    let mut old = worker(kit, &dir, "old", ttl);
    old.ok(&format!("multi {spec}"), Duration::from_secs(10));
    old.pause();
    let client = kit.connect(ttl).expect("connect");
    let refs: Vec<(&str, LockKind)> = parts.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    let new = client
        .multi_lock_of(&refs)
        .unwrap()
        .try_lock_for(scale(kit.granted(ttl) + Duration::from_secs(10)))
        .unwrap()
        .expect("another client takes every name");
    old.resume();
    let status = old.ok("status", Duration::from_secs(10));
    assert_ne!(
        field(&status, "lost"),
        "no",
        "the old holder knows: {status}"
    );
    let lost_name = field(&status, "lost_name");
    assert!(
        lost_name == a || lost_name == b,
        "the loss names one of the locks: {status}"
    );
    let _ = old.request("release", Duration::from_secs(30));
    new.check().expect("the new holder still holds");
}

/// Two worker processes take the same two names in opposite orders,
/// `rounds` times each: both finish (no deadlock) and their critical
/// sections never overlap.
pub fn opposite_orders_from_two_processes_never_deadlock<K: Kit>(kit: &K, rounds: usize) {
    let (a, b) = (name("multi-proc-a"), name("multi-proc-b"));
    let dir = TestDir::new("multi-orders");
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = [format!("m:{a},m:{b}"), format!("m:{b},m:{a}")]
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut w = worker(kit, &dir, &format!("orders-{i}"), Duration::from_secs(10));
            let inside = inside.clone();
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    w.ok(&format!("multi {spec}"), scale(Duration::from_secs(30)));
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    inside.store(false, Ordering::SeqCst);
                    w.ok("release", Duration::from_secs(10));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a process finished every round");
    }
}

/// The tests that run other processes, once per store (not for every
/// variant of the connection the conformance suite runs).
#[macro_export]
macro_rules! process_suite {
    ($kit:ty) => {
        #[test]
        fn fault_rw_killed_reader_frees_a_writer_within_the_lease() {
            conformance::process_faults::killed_holder_frees_a_side_within_the_lease(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
                recipes_core::Access::Read,
                recipes_core::Access::Write,
            );
        }

        #[test]
        fn fault_rw_killed_writer_frees_a_reader_within_the_lease() {
            conformance::process_faults::killed_holder_frees_a_side_within_the_lease(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
                recipes_core::Access::Write,
                recipes_core::Access::Read,
            );
        }

        #[test]
        fn fault_rw_paused_writer_is_fenced_out() {
            conformance::process_faults::paused_holder_is_fenced_out(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
                recipes_core::Access::Write,
            );
        }

        #[test]
        fn fault_rw_paused_reader_is_fenced_out() {
            conformance::process_faults::paused_holder_is_fenced_out(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
                recipes_core::Access::Read,
            );
        }

        #[test]
        fn fault_multi_killed_holder_frees_every_name() {
            conformance::process_faults::killed_multi_lock_holder_frees_every_name(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_multi_paused_holder_is_told_which_name() {
            conformance::process_faults::paused_multi_lock_holder_is_told_which_name(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        // Once per store, not per variant of the connection: 8,000
        // contended adds take a minute on etcd.
        #[test]
        fn counter_eight_processes_add_a_thousand_each() {
            conformance::counter::processes_add_without_losing_one(
                &<$kit as conformance::Kit>::shared(),
                8,
                1_000,
            );
        }

        #[test]
        fn multi_opposite_orders_from_two_processes_never_deadlock() {
            conformance::process_faults::opposite_orders_from_two_processes_never_deadlock(
                &<$kit as conformance::Kit>::shared(),
                10,
            );
        }
    };
}
