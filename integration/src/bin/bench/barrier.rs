//! M8, the barrier: 10 and 100 waiters (over at most 10 clients, each its
//! own session, as separate processes would be) blocked in `wait` on one
//! set barrier; one `remove` from another client; the time from the
//! removal's start to each waiter's wake: p50, p99 and the last (`max_us`,
//! the barrier's whole release). Beside it, the raw fan-out of the same
//! size in the same run (`raw_fanout.rs`): as many raw waiters, each on
//! the store's own notification, released by one raw delete that
//! notifies, timed the same way (where a store has none: two `ping`s,
//! the removal's round trip and the waiter's read).
//! Violations: a waiter woken before the removal, or one not woken.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_core::Client;

use crate::measures::{Sizes, Store};
use crate::out::{line, percentile_us, V};

/// M8: the barrier's removal to its waiters' wakes.
pub fn m8<C: Client>(store: &Store<C>, sizes: &Sizes) {
    for &waiters in sizes.waiters.iter().filter(|&&w| w <= 100) {
        for round in 0..sizes.rounds.min(3) {
            release(store, waiters, round);
        }
    }
}

fn release<C: Client>(store: &Store<C>, waiters: usize, round: usize) {
    let name = store.lock_name(&format!("m8-barrier-{waiters}"));
    let setter = (store.connect)(Duration::from_secs(10));
    let barrier = setter.barrier(&name).unwrap();
    barrier.set().unwrap();
    let clients: Vec<C> = (0..waiters.min(10))
        .map(|_| (store.connect)(Duration::from_secs(10)))
        .collect();
    let ready = Arc::new(AtomicUsize::new(0));
    let (violations, woken) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..waiters)
            .map(|i| {
                let b = clients[i % clients.len()].barrier(&name).unwrap();
                let ready = ready.clone();
                s.spawn(move || {
                    // Up: a timed look returns at once, then the wait.
                    let up = !b.wait_timeout(Duration::ZERO).unwrap();
                    ready.fetch_add(1, Ordering::SeqCst);
                    let down = b.wait_timeout(Duration::from_secs(60)).unwrap();
                    (up && down, Instant::now())
                })
            })
            .collect();
        while ready.load(Ordering::SeqCst) < waiters {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Each waiter's read and subscription after its look: a settle,
        // so the removal finds them waiting (a late one only reads the
        // barrier down, which costs it less).
        std::thread::sleep(Duration::from_millis(200));
        let removed = Instant::now();
        barrier.remove().unwrap();
        let mut violations = 0;
        let woken: Vec<Duration> = threads
            .into_iter()
            .map(|t| {
                let (ok, at) = t.join().unwrap();
                violations += u64::from(!ok || at < removed);
                at.saturating_duration_since(removed)
            })
            .collect();
        (violations, woken)
    });
    let mut woken = woken;
    let last = woken.iter().max().copied().unwrap_or_default();
    let figures = vec![
        ("case", V::S("remove".into())),
        ("waiters", V::N(waiters as f64)),
        ("clients", V::N(clients.len() as f64)),
        ("p50_us", V::N(percentile_us(&mut woken, 50.0))),
        ("p99_us", V::N(percentile_us(&mut woken, 99.0))),
        ("max_us", V::N(last.as_secs_f64() * 1e6)),
    ];
    let raw = match &store.raw_fanout {
        Some(fanout) => {
            let mut woken = fanout(waiters, clients.len(), round);
            let last = woken.iter().max().copied().unwrap_or_default();
            vec![
                ("case", V::S("raw fan-out".into())),
                ("waiters", V::N(woken.len() as f64)),
                ("p50_us", V::N(percentile_us(&mut woken, 50.0))),
                ("p99_us", V::N(percentile_us(&mut woken, 99.0))),
                ("max_us", V::N(last.as_secs_f64() * 1e6)),
            ]
        }
        None => {
            let mut pings: Vec<Duration> = (0..50).map(|_| setter.ping().unwrap() * 2).collect();
            vec![
                ("case", V::S("two pings".into())),
                ("p50_us", V::N(percentile_us(&mut pings, 50.0))),
            ]
        }
    };
    line("M8", store.name, figures, Some(raw), violations);
    for c in clients {
        let _ = c.close();
    }
    let _ = setter.close();
}
