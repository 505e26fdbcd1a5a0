//! The multi-lock, the same on every store: opposite orders never
//! deadlock, a timed acquisition gives everything back, one token per
//! name, the loss of any one lease names it, bad lists are refused before
//! anything is written.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::{scale, wait_until};
use recipes_core::metrics::LOSSES;
use recipes_core::{Client, Error, LockKind, MAX_MULTI_LOCK_NAMES};

use super::metrics::{alone_in_this_process, recorded, scalar};
use super::{name, Kit};

const TTL: Duration = Duration::from_secs(10);

fn client<K: Kit>(kit: &K) -> K::Client
where
    K::Client: recipes_core::Client,
{
    kit.connect(TTL).expect("connect")
}

fn left<C: Client>(c: &C, names: &[&str]) -> usize {
    names
        .iter()
        .map(|n| c.contenders(n).expect("contenders").len())
        .sum()
}

/// Two clients take the same names in opposite orders, many times over:
/// neither deadlocks, and their critical sections never overlap.
pub fn opposite_orders_never_deadlock<K: Kit>(kit: &K, rounds: usize)
where
    K::Client: recipes_core::Client,
{
    let (a, b) = (name("multi-a"), name("multi-b"));
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = [[a.clone(), b.clone()], [b.clone(), a.clone()]]
        .into_iter()
        .map(|order| {
            let c = client(kit);
            let (inside, done) = (inside.clone(), done.clone());
            std::thread::spawn(move || {
                let names: Vec<&str> = order.iter().map(String::as_str).collect();
                let multi = c.multi_lock(&names).unwrap();
                for _ in 0..rounds {
                    let g = multi.lock().unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    std::thread::yield_now();
                    inside.store(false, Ordering::SeqCst);
                    g.release().unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    wait_until(
        "both multi-locks finished every round",
        scale(Duration::from_secs(60)),
        || done.load(Ordering::SeqCst) == 2 * rounds,
    );
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(left(&client(kit), &[&a, &b]), 0, "entries left behind");
}

/// A timed multi-lock whose deadline passes gives back what it took.
pub fn a_timed_out_multi_lock_gives_everything_back<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let (a, b, c) = (name("multi-free"), name("multi-held"), name("multi-later"));
    let (me, other) = (client(kit), client(kit));
    let held = other.mutex(&b).unwrap().lock().unwrap();
    let multi = me.multi_lock(&[&c, &a, &b]).unwrap();
    let got = multi.try_lock_for(Duration::from_millis(300)).unwrap();
    assert!(got.is_none(), "a multi-lock over a held name");
    assert!(multi.try_lock().unwrap().is_none());
    assert_eq!(left(&me, &[&a, &c]), 0, "the free names were given back");
    // What it gave back is free for others at once.
    other
        .mutex(&a)
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
    held.release().unwrap();
    multi.lock().unwrap().release().unwrap();
    assert_eq!(left(&me, &[&a, &b, &c]), 0, "entries left behind");
}

/// Each name's token, fenced writes naming the resource, and the loss of
/// any one lease firing the guard's signal with that name.
pub fn one_token_per_name_and_any_loss_names_it<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let (m, r, w) = (name("multi-m"), name("multi-r"), name("multi-w"));
    let me = client(kit);
    let parts = [
        (w.as_str(), LockKind::Write),
        (m.as_str(), LockKind::Mutex),
        (r.as_str(), LockKind::Read),
    ];
    let g = me.multi_lock_of(&parts).unwrap().lock().unwrap();
    for (n, _) in &parts {
        assert!(g.token(n).is_some(), "no token for {n}");
    }
    assert_eq!(g.token("/not/held"), None);
    let resource = format!("{}-data", name("multi-resource"));
    g.put(&w, &resource, b"v1").unwrap();
    assert_eq!(kit.value(&resource).as_deref(), Some("v1"));
    assert!(matches!(
        g.put("/not/held", &resource, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(g.lost_name().is_none() && !g.is_lost());
    // Another reader shares the read side meanwhile.
    let other = client(kit);
    other
        .rw_lock(&r)
        .unwrap()
        .try_read()
        .unwrap()
        .expect("readers share")
        .release()
        .unwrap();
    kit.delete_entry(g.holder(&m).expect("holder"));
    let reason = g.lost().wait_timeout(scale(Duration::from_secs(10)));
    assert!(reason.is_some(), "the guard's loss signal did not fire");
    assert_eq!(g.lost_name().as_deref(), Some(m.as_str()));
    assert!(g.check().is_err());
    let _ = g.release();
    wait_until("nothing left", scale(Duration::from_secs(10)), || {
        left(&me, &[&m, &r, &w]) == 0
    });
}

/// A lease taken first and lost while a later name is waited for is never
/// handed out: the multi-lock gives back what it holds and takes every
/// name again, behind whoever took the lost name meanwhile.
pub fn a_part_lost_while_waiting_is_taken_again<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    // The loss is seen in the metrics, which count every mutex of the
    // process: only a test alone in its process can read them so.
    if !alone_in_this_process() {
        eprintln!("SKIP: needs a process of its own (cargo nextest)");
        return;
    }
    recorded();
    // Short leases: session mode waits out a lost holder's before the next.
    let short = || kit.connect(Duration::from_secs(2)).expect("connect");
    let (me, other, third) = (short(), short(), short());
    let (x, y) = (name("multi-lost-x"), name("multi-lost-y"));
    let multi = me.multi_lock(&[&y, &x]).unwrap();
    // `a` is taken first, `b` waited on: by name, or by advisory key in
    // PostgreSQL session mode.
    let order: Vec<String> = multi.names().map(str::to_owned).collect();
    let (a, b) = (order[0].clone(), order[1].clone());
    let store = me.store();
    let deleted = || {
        let labels = [("store", store), ("recipe", "mutex"), ("reason", "deleted")];
        scalar(LOSSES, &labels)
    };
    let holds_b = other.mutex(&b).unwrap().lock().unwrap();
    let waiter = std::thread::spawn(move || multi.lock());
    let queued = |n: &str| me.contenders(n).expect("contenders").len();
    wait_until(
        "a held and b waited on",
        scale(Duration::from_secs(10)),
        || queued(&a) == 1 && queued(&b) == 2,
    );
    let before = deleted();
    kit.delete_entry(&me.contenders(&a).unwrap()[0].holder);
    wait_until("a's loss seen", scale(Duration::from_secs(10)), || {
        deleted() > before
    });
    let holds_a = third.mutex(&a).unwrap().lock().unwrap();
    holds_b.release().unwrap();
    wait_until(
        "the multi-lock returned, or gave b back and queued for a",
        scale(Duration::from_secs(10)),
        || waiter.is_finished() || (queued(&a) == 2 && queued(&b) == 0),
    );
    assert!(
        !waiter.is_finished(),
        "a multi-lock was handed out with a part lost: {:?}",
        waiter.join()
    );
    let third_token = holds_a.token();
    holds_a.release().unwrap();
    let g = waiter.join().unwrap().expect("every lock, once a is free");
    assert!(!g.is_lost(), "{:?}", g.lost_name());
    assert!(
        g.token(&a).unwrap() > third_token,
        "a taken again after the third"
    );
    g.release().unwrap();
    assert_eq!(left(&me, &[&a, &b]), 0, "entries left behind");
}

/// Bad lists are refused before anything is written.
pub fn bad_lists_are_refused_and_leave_nothing<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let me = client(kit);
    let (a, b) = (name("multi-bad-a"), name("multi-bad-b"));
    let nested = format!("{a}/inner");
    let many: Vec<String> = (0..1000).map(|i| format!("{b}-{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(many.len() > MAX_MULTI_LOCK_NAMES);
    let lists: Vec<Vec<(&str, LockKind)>> = vec![
        vec![],
        vec![
            (a.as_str(), LockKind::Mutex),
            (b.as_str(), LockKind::Mutex),
            (a.as_str(), LockKind::Mutex),
        ],
        vec![(a.as_str(), LockKind::Read), (a.as_str(), LockKind::Write)],
        vec![
            (a.as_str(), LockKind::Mutex),
            (nested.as_str(), LockKind::Mutex),
        ],
        many.iter().map(|n| (*n, LockKind::Mutex)).collect(),
        vec![(a.as_str(), LockKind::Mutex), ("", LockKind::Mutex)],
    ];
    for parts in lists {
        let made = me.multi_lock_of(&parts);
        assert!(
            matches!(made, Err(Error::InvalidArgument(_))),
            "{} parts: {made:?}",
            parts.len()
        );
    }
    assert_eq!(left(&me, &[&a, &b, &nested]), 0, "entries left behind");
}

/// A multi-lock's release against a store that does not answer ends
/// within about one RPC timeout, not one per name (the parts are released
/// at once), with the error of an unconfirmed release; the entries go
/// with the cut-off client's session.
pub fn an_unanswered_release_ends_within_one_rpc_timeout<K: Kit>(kit: &K)
where
    K::Client: recipes_core::Client,
{
    let (ttl, rpc) = (Duration::from_secs(2), Duration::from_secs(1));
    let names: Vec<String> = (0..6).map(|i| name(&format!("multi-cut-{i}"))).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let proxy = integration::Proxy::start(kit.server_addr());
    let cut = kit.connect_via(proxy.addr(), ttl, rpc).expect("connect");
    let guard = cut.multi_lock(&refs).unwrap().lock().unwrap();
    proxy.blackhole();
    let started = std::time::Instant::now();
    let released = guard.release();
    let took = started.elapsed();
    assert!(
        matches!(released, Err(Error::Indeterminate { .. })),
        "an unanswered release: {released:?}"
    );
    assert!(
        took < scale(rpc * 3),
        "{} parts released one after the other: {took:?}",
        refs.len()
    );
    let reader = client(kit);
    wait_until(
        "the cut-off client's entries went",
        scale(Duration::from_secs(15)),
        || left(&reader, &refs) == 0,
    );
    drop(cut);
}
