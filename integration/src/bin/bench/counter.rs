//! M7, the shared counter: 1, 4 and 8 writers (each its own client, as
//! separate processes would be) calling `add(1)` on one counter for the
//! run's time: adds a second in all, p50/p99 of one add, and conflicts
//! (compare-and-sets lost to another writer and retried) per add. Beside
//! it, the raw floor of the same run: an add is at least a read and a
//! compare-and-set, two round trips, so the raw figures are two `ping`s
//! (p50, and the rate one writer would reach at that latency).
//! Violations: the counter's final value differs from the adds counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use recipes_core::Client;

use crate::measures::{Sizes, Store};
use crate::out::{line, percentile_us, rate_and_latency, V};

/// M7: the counter's `add` under 1, 4 and 8 writers.
pub fn m7<C: Client>(store: &Store<C>, sizes: &Sizes) {
    for writers in [1, 4, 8] {
        adds(store, sizes, writers);
    }
}

fn adds<C: Client>(store: &Store<C>, sizes: &Sizes, writers: usize) {
    let name = store.lock_name(&format!("m7-counter-{writers}"));
    let clients: Vec<C> = (0..writers)
        .map(|_| (store.connect)(Duration::from_secs(10)))
        .collect();
    let conflicts = AtomicU64::new(0);
    let started = Instant::now();
    let mut samples: Vec<Duration> = std::thread::scope(|s| {
        let runs: Vec<_> = clients
            .iter()
            .map(|c| {
                let (counter, conflicts) = (c.counter(&name).unwrap(), &conflicts);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while started.elapsed() < sizes.seconds {
                        let t = Instant::now();
                        let added = counter.add_counted(1).unwrap();
                        mine.push(t.elapsed());
                        conflicts.fetch_add(added.conflicts, Ordering::Relaxed);
                    }
                    mine
                })
            })
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    let counter = clients[0].counter(&name).unwrap();
    let total = counter.get().unwrap().value;
    let violations = u64::from(total != samples.len() as i64);
    let _ = counter.delete();
    let conflicts = conflicts.load(Ordering::Relaxed) as f64 / samples.len().max(1) as f64;
    let figures = [
        ("case", V::S("add".into())),
        ("writers", V::N(writers as f64)),
        ("conflicts_per_add", V::N(conflicts)),
    ]
    .into_iter()
    .chain(rate_and_latency(&mut samples, elapsed))
    .collect();
    let mut pings: Vec<Duration> = (0..50).map(|_| clients[0].ping().unwrap() * 2).collect();
    let floor = percentile_us(&mut pings, 50.0);
    let raw = vec![
        ("case", V::S("two pings".into())),
        ("ops_per_sec", V::N(1e6 / floor)),
        ("p50_us", V::N(floor)),
    ];
    line("M7", store.name, figures, Some(raw), violations);
    for c in clients {
        let _ = c.close();
    }
}
