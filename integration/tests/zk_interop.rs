//! Our ZooKeeper mutex against other libraries' locks on the same path:
//! Apache Curator 5.4's `InterProcessMutex` (a JVM) and kazoo 2.8's `Lock`
//! (Python), driven as peer processes (`integration::peers`).
//!
//! What holds (design §6): our nodes use Curator's layout
//! `<path>/_c_<uuid>-lock-<seq10>`, and we queue behind the trailing
//! sequence of *any* child, so
//! - Curator and we exclude each other in both orders;
//! - a kazoo `Lock` holder (`<hex>__lock__<seq10>`) excludes us;
//! - we exclude a kazoo `Lock` made with `extra_lock_patterns=["-lock-"]`.
//!
//! What does not, asserted as the unsafe outcome so that a change in either
//! library shows up here:
//! - a default kazoo `Lock` only queues behind `__lock__` names: it takes a
//!   lock that Curator or we hold;
//! - Curator sorts children by what follows `lock-` in the name; a kazoo
//!   name has no `lock-`, so Curator sorts it by the whole name, which
//!   starts with a hex uuid and comes after Curator's bare digits: Curator
//!   takes a lock that any kazoo `Lock` holds.
//!
//! Every test has its own path on one shared server and starts at most one
//! JVM. Exclusion is checked two ways: a timed acquire on the other side
//! times out while one side holds, and a queued waiter that acquires checks
//! a sentinel the test sets just before the holder releases.
//!
//! (kazoo's `Lock`: `zk_kazoo.rs`.)

mod zk_peers;

use zk_peers::*;

use recipes_core::Client as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use integration::peers::CuratorPeer;
use integration::wait_until;
use recipes_zk::ZkClient;

#[test]
fn curator_holds_ours_waits_then_takes_over() {
    let case = Case::new("curator-first");
    let path = &case.path;
    let mut curator = case.curator("holder");
    let mutex = case.our_mutex(path);

    assert!(
        curator.lock_for(path, ACQUIRE),
        "Curator acquires a free lock"
    );
    let held = case.facts.children(path);
    assert!(
        held.len() == 1 && is_curator_layout(&held[0]),
        "one Curator node: {held:?}"
    );
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");

    let curator_releasing = AtomicBool::new(false);
    let guard = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
            assert!(
                curator_releasing.load(Ordering::SeqCst),
                "ours acquired while Curator held the lock"
            );
            guard
        });
        case.wait_contenders(path, 2, "have our node queued behind Curator's");
        curator_releasing.store(true, Ordering::SeqCst);
        curator.release();
        waiter.join().unwrap()
    });
    let guard = guard.expect("ours acquires once Curator released");

    assert!(
        !curator.lock_for(path, EXCLUDED),
        "Curator must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose Curator's timed-out node");
    guard.release().unwrap();
    assert!(
        curator.lock_for(path, ACQUIRE),
        "Curator acquires after ours"
    );
    curator.release();
    curator.exit();
}

#[test]
fn ours_holds_curator_waits_then_takes_over() {
    let case = Case::new("ours-first");
    let path = &case.path;
    let mut curator = case.curator("waiter");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        !curator.lock_for(path, EXCLUDED),
        "Curator must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose Curator's timed-out node");

    let ours_releasing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let acquired = curator.lock_for(path, ACQUIRE * 2);
            assert!(
                !acquired || ours_releasing.load(Ordering::SeqCst),
                "Curator acquired while ours held the lock"
            );
            acquired
        });
        case.wait_contenders(path, 2, "have Curator's node queued behind ours");
        ours_releasing.store(true, Ordering::SeqCst);
        guard.release().unwrap();
        assert!(
            waiter.join().unwrap(),
            "Curator acquires once ours released"
        );
    });

    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");
    curator.release();
    let guard = mutex.try_lock_for(ACQUIRE).unwrap();
    guard
        .expect("ours acquires after Curator")
        .release()
        .unwrap();
    curator.exit();
}

/// Curator's `LeaderSelector` is a mutex on its path (design §6: our
/// selector shares its layout), so its leadership and our mutex exclude
/// each other.
#[test]
fn curator_leader_selector_and_ours_exclude_each_other() {
    let case = Case::new("selector");
    let path = &case.path;
    let mut curator = case.curator("selector");
    let mutex = case.our_mutex(path);

    curator.ok(&format!("selector {path} first"), FACT);
    wait_until("Curator's selector leads", FACT, || {
        is_leading(&mut curator)
    });
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while Curator's selector leads"
    );
    curator.ok("resign", FACT);
    let guard = mutex.try_lock_for(ACQUIRE).unwrap();
    let guard = guard.expect("ours acquires once the selector resigned");

    // A new selector (no auto-requeue, so the first one is out) queues
    // behind ours and leads only after our release.
    curator.ok("close-selector", FACT);
    curator.ok(&format!("selector {path} second"), FACT);
    case.wait_contenders(path, 2, "have the selector queued behind ours");
    assert!(!is_leading(&mut curator), "Curator leads while ours holds");
    guard.release().unwrap();
    wait_until("Curator's second selector leads", FACT, || {
        is_leading(&mut curator)
    });
    curator.ok("close-selector", FACT);
    curator.exit();
}

fn is_leading(curator: &mut CuratorPeer) -> bool {
    match curator.ok("is-leading", FACT).as_str() {
        "yes" => true,
        "no" => false,
        other => panic!("is-leading answered {other:?}"),
    }
}

/// Handoffs in both directions, round after round: the first side holds
/// until the other is queued behind it, then releases to it.
#[test]
fn curator_and_ours_alternate_under_contention() {
    const ROUNDS: usize = 8;
    let case = Case::new("alternate");
    let path = &case.path;
    let mut curator = case.curator("alternate");
    let mutex = case.our_mutex(path);
    let holder = Sentinel(AtomicU8::new(NOBODY));

    for round in 0..ROUNDS {
        if round % 2 == 0 {
            // Curator first; ours queues behind it.
            std::thread::scope(|s| {
                let first = s.spawn(|| {
                    assert!(curator.lock_for(path, ACQUIRE), "round {round}: Curator");
                    holder.enter(CURATOR, round);
                    case.wait_contenders(path, 2, "have ours queued behind Curator");
                    holder.leave(CURATOR);
                    curator.release();
                });
                case.facts
                    .wait_children(path, "have Curator's node", FACT, |c| !c.is_empty());
                let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
                let guard = guard.unwrap_or_else(|| panic!("round {round}: ours timed out"));
                holder.enter(OURS, round);
                holder.leave(OURS);
                guard.release().unwrap();
                first.join().unwrap();
            });
        } else {
            // Ours first; Curator queues behind it.
            let guard = mutex.try_lock_for(ACQUIRE).unwrap();
            let guard = guard.unwrap_or_else(|| panic!("round {round}: ours timed out"));
            holder.enter(OURS, round);
            std::thread::scope(|s| {
                let second = s.spawn(|| {
                    assert!(
                        curator.lock_for(path, ACQUIRE * 2),
                        "round {round}: Curator"
                    );
                    holder.enter(CURATOR, round);
                    holder.leave(CURATOR);
                    curator.release();
                });
                case.wait_contenders(path, 2, "have Curator queued behind ours");
                holder.leave(OURS);
                guard.release().unwrap();
                second.join().unwrap();
            });
        }
        case.wait_contenders(path, 0, "be empty after the round");
    }
    curator.exit();
}

fn curator_is_leader(curator: &mut CuratorPeer) -> bool {
    match curator.ok("is-leader", FACT).as_str() {
        "yes" => true,
        "no" => false,
        other => panic!("is-leader answered {other:?}"),
    }
}

#[test]
fn curator_leader_latch_and_ours_never_both_lead() {
    let case = Case::new("latch");
    let path = &case.path;
    let mut curator = case.curator("latch");
    curator.ok(&format!("latch {path} curator"), FACT);
    wait_until("Curator's latch leads", FACT, || {
        curator_is_leader(&mut curator)
    });

    let ours = ZkClient::builder(Case::connect())
        .session_timeout(SESSION)
        .connect()
        .expect("connect our client")
        .leader_latch(path, "ours")
        .unwrap();
    ours.start();
    case.wait_contenders(path, 2, "have our latch queued behind Curator's");
    assert!(
        !ours.has_leadership(),
        "ours leads while Curator's latch leads"
    );
    let participants = ours.participants().unwrap();
    assert_eq!(
        participants[0].id, "curator",
        "Curator's participant id is read"
    );
    assert_eq!(participants[1].id, "ours");

    // Curator leaves: ours leads; Curator's new latch queues behind ours.
    curator.ok("close-latch", FACT);
    assert!(
        ours.await_leadership(ACQUIRE),
        "ours leads after Curator left"
    );
    curator.ok(&format!("latch {path} curator-again"), FACT);
    case.wait_contenders(path, 2, "have Curator's latch queued behind ours");
    assert!(
        !curator_is_leader(&mut curator),
        "Curator leads while ours leads"
    );
    assert!(ours.has_leadership());
    ours.close().unwrap();
    wait_until("Curator's latch leads after ours closed", FACT, || {
        curator_is_leader(&mut curator)
    });
    curator.ok("close-latch", FACT);
    curator.exit();
}
