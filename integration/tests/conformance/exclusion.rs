//! Properties 1 and 6, without faults: critical sections of worker
//! processes never overlap and their fences increase in holding order, and
//! one release wakes one waiter (no herd).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration::test_dir::TestDir;
use integration::worker::{worker_binary, Worker};
use integration::{scale, wait_until};
use parking_lot::Mutex as PlMutex;
use recipes_core::{FenceGate, FencingToken};

use super::{name, token_of, Kit};

/// Property 6: no herd — with `waiters` queued behind a holder, one
/// release makes exactly one waiter read the queue again (the one it woke),
/// and that one acquires.
pub fn one_release_wakes_one_waiter<K: Kit>(kit: &K, waiters: usize) {
    use std::sync::atomic::AtomicUsize;
    let name = name("herd");
    let holder = kit.mutex(&name, Duration::from_secs(10)).lock().unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let threads: Vec<_> = (0..waiters)
        .map(|_| {
            let m = kit.mutex(&name, Duration::from_secs(10));
            let (acquired, go) = (acquired.clone(), go_rx.clone());
            std::thread::spawn(move || {
                let g = m.lock().unwrap();
                acquired.fetch_add(1, Ordering::SeqCst);
                // Hold until told, so no second release happens.
                let _ = go.recv();
                g.release().unwrap();
            })
        })
        .collect();
    wait_until(
        "every waiter is queued and watching",
        scale(Duration::from_secs(30)),
        || kit.all_waiters_watch(&name, waiters),
    );
    let before = recipes_core::store::engine::queue_reads();
    holder.release().unwrap();
    wait_until(
        "one waiter acquired",
        scale(Duration::from_secs(10)),
        || acquired.load(Ordering::SeqCst) == 1,
    );
    let reads = recipes_core::store::engine::queue_reads() - before;
    assert_eq!(reads, 1, "queue reads after one release, {waiters} waiting");
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    drop(go_tx);
    for t in threads {
        t.join().unwrap();
    }
}

/// Property 1: ≥ 4 worker processes × many acquisitions, no overlap, fences
/// strictly increasing in holding order, every fenced write accepted.
pub fn mutual_exclusion<K: Kit>(kit: &K, workers: usize, rounds: usize) {
    let name = name("mutex");
    let resource = format!("{name}-resource");
    let dir = TestDir::new("mutual-exclusion");
    let inside = Arc::new(AtomicBool::new(false));
    let order = Arc::new(PlMutex::new(Vec::<FencingToken>::new()));
    let gate = Arc::new(FenceGate::new());
    let threads: Vec<_> = (0..workers)
        .map(|i| {
            let mut w = Worker::start(&worker_binary(), &format!("mx{i}"), dir.path());
            w.ok(
                &kit.worker_connect(Duration::from_secs(10)),
                Duration::from_secs(15),
            );
            let (inside, order, gate) = (inside.clone(), order.clone(), gate.clone());
            let (name, resource) = (name.clone(), resource.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let reply = w.ok(&format!("lock {name}"), Duration::from_secs(60));
                    let token = token_of(&reply);
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders at once (token {token})"
                    );
                    {
                        let mut order = order.lock();
                        if let Some(last) = order.last() {
                            assert!(token > *last, "fence {token} after {last}");
                        }
                        order.push(token);
                    }
                    // The critical section: a write fenced in the store and
                    // one checked at the resource.
                    w.ok(
                        &format!("write {resource} {token}"),
                        Duration::from_secs(10),
                    );
                    gate.admit(token)
                        .expect("the holder's token passes the gate");
                    inside.store(false, Ordering::SeqCst);
                    w.ok("release", Duration::from_secs(10));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a worker thread failed");
    }
    let order = order.lock();
    assert_eq!(order.len(), workers * rounds);
    assert_eq!(
        kit.value(&resource).as_deref(),
        Some(order.last().unwrap().to_string().as_str()),
        "the store holds the last holder's write"
    );
}
