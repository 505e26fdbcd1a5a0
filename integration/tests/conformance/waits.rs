//! Barrier and double barrier, the same on every store: a removal wakes
//! every waiter once, a session-tied barrier goes with its setter, a
//! double barrier lets nobody in before `count` members and nobody out
//! before all left, a member that ends its session leaves with it, bad
//! input is refused and leaves nothing. Every store has them (a store
//! without them would have to refuse with a typed error, which
//! `has_waits` checks).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::{scale, wait_until};
use recipes_core::{Client, Error, MAX_DOUBLE_BARRIER_COUNT};

use super::{name, Kit};

const TTL: Duration = Duration::from_secs(10);

fn client<K: Kit>(kit: &K) -> K::Client {
    kit.connect(TTL).expect("connect")
}

/// Whether the store has barriers; if not, its refusal is checked.
fn has_waits<C: Client>(c: &C) -> bool {
    match c.barrier("/conformance/probe") {
        Ok(_) => true,
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("not available"), "refusal says why: {why}");
            let refused = c.double_barrier("/conformance/probe", 2);
            assert!(matches!(refused, Err(Error::InvalidArgument(_))));
            false
        }
        Err(e) => panic!("a barrier of {} failed: {e}", c.store()),
    }
}

/// Five waiters on a set barrier stay blocked; its removal lets each of
/// them through, once; a never-set barrier lets a waiter through at once.
pub fn a_barrier_removal_wakes_every_waiter_once<K: Kit>(kit: &K) {
    let setter = client(kit);
    if !has_waits(&setter) {
        return;
    }
    let n = name("barrier");
    let barrier = setter.barrier(&n).unwrap();
    assert!(
        barrier.wait_timeout(Duration::ZERO).unwrap(),
        "never set: down"
    );
    barrier.set().unwrap();
    barrier.set().unwrap(); // twice is once
    let through = Arc::new(AtomicUsize::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..5)
        .map(|_| {
            let c = client(kit);
            let (n, through, waiting) = (n.clone(), through.clone(), waiting.clone());
            std::thread::spawn(move || {
                let b = c.barrier(&n).unwrap();
                assert!(
                    !b.wait_timeout(Duration::from_millis(50)).unwrap(),
                    "up: blocks"
                );
                waiting.fetch_add(1, Ordering::SeqCst);
                b.wait().unwrap();
                through.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    wait_until("every waiter waits", scale(Duration::from_secs(20)), || {
        waiting.load(Ordering::SeqCst) == 5
    });
    assert_eq!(through.load(Ordering::SeqCst), 0, "nobody through while up");
    barrier.remove().unwrap();
    wait_until(
        "every waiter through",
        scale(Duration::from_secs(10)),
        || through.load(Ordering::SeqCst) == 5,
    );
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(through.load(Ordering::SeqCst), 5, "each through once");
    barrier.remove().unwrap(); // removing a down barrier is nothing
    assert_eq!(setter.read(&n).unwrap(), None, "nothing left at {n}");
}

/// A barrier tied to its setter's session goes when the setter's client
/// closes; a plain one stays.
pub fn a_tied_barrier_goes_with_its_setter<K: Kit>(kit: &K) {
    let (setter, waiter) = (client(kit), client(kit));
    if !has_waits(&setter) {
        return;
    }
    let (tied, plain) = (name("barrier-tied"), name("barrier-plain"));
    setter
        .barrier(&tied)
        .unwrap()
        .tied_to_session()
        .set()
        .unwrap();
    setter.barrier(&plain).unwrap().set().unwrap();
    assert!(!waiter
        .barrier(&tied)
        .unwrap()
        .wait_timeout(Duration::ZERO)
        .unwrap());
    setter.close().unwrap();
    let b = waiter.barrier(&tied).unwrap();
    assert!(
        b.wait_timeout(scale(Duration::from_secs(10))).unwrap(),
        "tied: gone"
    );
    let p = waiter.barrier(&plain).unwrap();
    assert!(
        !p.wait_timeout(Duration::from_millis(100)).unwrap(),
        "plain: stays"
    );
    p.remove().unwrap();
    assert_eq!(waiter.read(&plain).unwrap(), None);
}

/// Five members, count 5: none passes `enter` before the fifth entered;
/// a timed enter that gives up leaves nothing; a member whose client
/// closes while the others leave does not hold them; nothing is left.
pub fn a_double_barrier_gathers_count_and_leaves_nothing<K: Kit>(kit: &K) {
    let probe = client(kit);
    if !has_waits(&probe) {
        return;
    }
    let n = name("double");
    // Alone: a timed enter gives up and takes its member back.
    let lonely = probe.double_barrier(&n, 5).unwrap();
    assert!(lonely
        .enter_timeout(Duration::from_millis(100))
        .unwrap()
        .is_none());
    assert!(
        kit.entries_under(&n).is_empty(),
        "a timed-out enter left {:?}",
        kit.entries_under(&n)
    );
    let entered = Arc::new(AtomicUsize::new(0));
    let left = Arc::new(AtomicUsize::new(0));
    let members: Vec<_> = (0..4)
        .map(|i| {
            let c = client(kit);
            let (n, entered, left) = (n.clone(), entered.clone(), left.clone());
            std::thread::spawn(move || {
                let m = c.double_barrier(&n, 5).unwrap().enter().unwrap();
                entered.fetch_add(1, Ordering::SeqCst);
                if i == 0 {
                    // Dies inside: its session ends without a leave.
                    drop(m);
                    c.close().unwrap();
                    return;
                }
                m.leave().unwrap();
                left.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    wait_until("four members in", scale(Duration::from_secs(20)), || {
        kit.entries_under(&n).len() == 4
    });
    assert_eq!(
        entered.load(Ordering::SeqCst),
        0,
        "nobody in before the fifth"
    );
    let last = probe.double_barrier(&n, 5).unwrap().enter().unwrap();
    wait_until("all five in", scale(Duration::from_secs(10)), || {
        entered.load(Ordering::SeqCst) == 4
    });
    assert!(!last.lost().is_lost());
    last.leave().unwrap();
    wait_until("every member out", scale(Duration::from_secs(20)), || {
        left.load(Ordering::SeqCst) == 3
    });
    for m in members {
        m.join().unwrap();
    }
    wait_until("nothing left", scale(Duration::from_secs(10)), || {
        kit.entries_under(&n).is_empty()
    });
}

/// Bad input: a count of 0 or over the limit, a barrier or double barrier
/// on a lock's name: typed errors, and nothing is left.
pub fn bad_input_is_refused_and_leaves_nothing<K: Kit>(kit: &K) {
    let c = client(kit);
    if !has_waits(&c) {
        return;
    }
    let n = name("waits-bad");
    for count in [0, MAX_DOUBLE_BARRIER_COUNT + 1] {
        match c.double_barrier(&n, count) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("count"), "{why}"),
            other => panic!("count {count}: {other:?}"),
        }
    }
    assert!(matches!(
        c.barrier("no-slash"),
        Err(Error::InvalidArgument(_))
    ));
    let lock = c.mutex(&n).unwrap();
    let held = lock.lock().unwrap();
    let before = kit.entries_under(&n);
    match c.barrier(&n).unwrap().wait_timeout(Duration::from_secs(1)) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("another recipe"), "{why}"),
        other => panic!("a barrier on a lock's name: {other:?}"),
    }
    match c
        .double_barrier(&n, 2)
        .unwrap()
        .enter_timeout(Duration::from_secs(1))
    {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("another recipe"), "{why}"),
        other => panic!("a double barrier on a lock's name: {other:?}"),
    }
    wait_until(
        "only the lock's entry",
        scale(Duration::from_secs(10)),
        || kit.entries_under(&n) == before,
    );
    held.release().unwrap();
    wait_until("nothing left", scale(Duration::from_secs(10)), || {
        kit.entries_under(&n).is_empty()
    });
}
