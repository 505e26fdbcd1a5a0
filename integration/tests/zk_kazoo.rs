//! Our ZooKeeper mutex against kazoo 2.8's `Lock` (Python) on the same path:
//! a kazoo holder excludes us, we exclude a kazoo `Lock` made with
//! `extra_lock_patterns=["-lock-"]`; and, asserted as the unsafe outcome so
//! that a change in either library shows up here, a default kazoo `Lock`
//! ignores ours, and kazoo and Curator mis-sort each other (see
//! `zk_interop.rs` for the layouts).

mod zk_peers;

use zk_peers::*;

use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn kazoo_lock_holder_excludes_ours() {
    let case = Case::new("kazoo-first");
    let path = &case.path;
    let mut kazoo = case.kazoo("holder");
    let mutex = case.our_mutex(path);

    assert!(kazoo.lock_for(path, ACQUIRE), "kazoo acquires a free lock");
    let held = case.facts.children(path);
    assert!(
        held.len() == 1 && is_kazoo_layout(&held[0]),
        "one kazoo node: {held:?}"
    );
    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while kazoo holds"
    );
    case.wait_contenders(path, 1, "lose our abandoned node");

    let kazoo_releasing = AtomicBool::new(false);
    let guard = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let guard = mutex.try_lock_for(ACQUIRE * 2).unwrap();
            assert!(
                kazoo_releasing.load(Ordering::SeqCst),
                "ours acquired while kazoo held the lock"
            );
            guard
        });
        case.wait_contenders(path, 2, "have our node queued behind kazoo's");
        kazoo_releasing.store(true, Ordering::SeqCst);
        kazoo.release();
        waiter.join().unwrap()
    });
    guard
        .expect("ours acquires once kazoo released")
        .release()
        .unwrap();
    kazoo.exit();
}

#[test]
fn ours_excludes_curator_aware_kazoo_lock() {
    let case = Case::new("kazoo-aware");
    let path = &case.path;
    let mut kazoo = case.kazoo("waiter");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        !kazoo.lock_curator_aware_for(path, EXCLUDED),
        "kazoo with extra_lock_patterns=[\"-lock-\"] must not acquire while ours holds"
    );
    case.wait_contenders(path, 1, "lose kazoo's timed-out node");

    let ours_releasing = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let acquired = kazoo.lock_curator_aware_for(path, ACQUIRE * 2);
            assert!(
                !acquired || ours_releasing.load(Ordering::SeqCst),
                "kazoo acquired while ours held the lock"
            );
            acquired
        });
        case.wait_contenders(path, 2, "have kazoo's node queued behind ours");
        ours_releasing.store(true, Ordering::SeqCst);
        guard.release().unwrap();
        assert!(waiter.join().unwrap(), "kazoo acquires once ours released");
    });

    assert!(
        mutex.try_lock_for(EXCLUDED).unwrap().is_none(),
        "ours must not acquire while kazoo holds"
    );
    kazoo.release();
    kazoo.exit();
}

/// Documents an unsafe mix: a default kazoo `Lock` does not see our nodes.
#[test]
fn default_kazoo_lock_ignores_ours_unsafe() {
    let case = Case::new("kazoo-default-vs-ours");
    let path = &case.path;
    let mut kazoo = case.kazoo("blind");
    let mutex = case.our_mutex(path);

    let guard = mutex.try_lock_for(ACQUIRE).unwrap().expect("ours acquires");
    assert!(
        kazoo.lock_for(path, ACQUIRE),
        "a default kazoo Lock queues only behind `__lock__` names, so it takes \
         the lock while ours holds; if this changed, update design §6"
    );
    kazoo.release();
    guard.release().unwrap();
    kazoo.exit();
}

/// Documents the unsafe mixes of kazoo and Curator, and the one safe
/// direction.
#[test]
fn default_kazoo_and_curator_mis_sort_unsafe() {
    let case = Case::new("kazoo-vs-curator");
    let mut curator = case.curator("mixed");
    let mut kazoo = case.kazoo("mixed");

    // Curator holds: a kazoo Lock that knows `-lock-` waits ...
    let path = case.other_path("curator-holds");
    assert!(curator.lock_for(&path, ACQUIRE));
    assert!(
        !kazoo.lock_curator_aware_for(&path, EXCLUDED),
        "kazoo with extra_lock_patterns=[\"-lock-\"] must wait for Curator"
    );
    // ... a default one does not.
    assert!(
        kazoo.lock_for(&path, ACQUIRE),
        "a default kazoo Lock ignores Curator's nodes and takes the lock Curator \
         holds; if this changed, update design §6"
    );
    kazoo.release();
    curator.release();

    // kazoo holds, even a Lock that knows `-lock-`: Curator sorts kazoo's
    // `<hex>__lock__<seq>` by its whole name (it has no `lock-`), after its
    // own node's bare digits, and takes the lock. (Only a uuid starting
    // with nine zeros would sort first: odds of 16^-9.)
    let path = case.other_path("kazoo-holds");
    assert!(kazoo.lock_curator_aware_for(&path, ACQUIRE));
    assert!(
        curator.lock_for(&path, ACQUIRE),
        "Curator mis-sorts kazoo's node and takes the lock kazoo holds; if this \
         changed, update design §6"
    );
    let both = case.facts.children(&path);
    assert!(
        both.iter().any(|c| is_kazoo_layout(c)) && both.iter().any(|c| is_curator_layout(c)),
        "both hold: {both:?}"
    );
    curator.release();
    kazoo.release();
    curator.exit();
    kazoo.exit();
}
