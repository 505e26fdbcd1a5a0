//! M6, the read-write lock and the multi-lock, each beside what it is
//! compared with in the same run:
//!
//! - `readers`: 8 clients (each its own session) taking and releasing the
//!   read side of one lock at once: cycles a second in all, beside 8 raw
//!   clients running the store's raw uncontended cycle at once (each on a
//!   name of its own: entries created and deleted with nothing to wait
//!   for). Goal: ≥ 0.9× the raw. Beside each, where the store says
//!   (etcd): the server's CPU and watch events and this process's CPU a
//!   cycle (`measures::Meter`). On PostgreSQL also statements a cycle,
//!   ours and the raw's, from the server's log (`pg_raw.rs`), counted in a
//!   shorter run of each after the timed ones (the logging slows them);
//!   `BENCH_SHOW_STATEMENTS=1` prints the statements and the WAL bytes a
//!   cycle wrote.
//! - `writer_handoff`: one writer taking the write side again and again
//!   while 4 readers churn: the writer's wait, p50/p99; violations = a
//!   writer holding while a reader holds.
//! - `multi_lock`: a multi-lock of 2 and of 8 free names, taken and
//!   released, beside as many mutexes taken one after the other and
//!   released.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use recipes_core::Client;

use crate::measures::{requests_per_cycle, Meter, Sizes, Store};
use crate::out::{line, percentile_us, rate_and_latency, Figures, V};

const READERS: usize = 8;

/// M6: readers at once, a writer among readers, multi-locks.
pub fn m6<C: Client>(store: &Store<C>, sizes: &Sizes) {
    readers(store, sizes);
    writer_handoff(store, sizes);
    for n in [2, 8] {
        multi_lock(store, sizes, n);
    }
}

/// The read side of `name` taken and released on each client at once
/// for `seconds`: each cycle's time.
fn read_cycles<C: Client>(clients: &[C], name: &str, seconds: Duration) -> Vec<Duration> {
    let started = Instant::now();
    std::thread::scope(|s| {
        let runs: Vec<_> = clients
            .iter()
            .map(|c| {
                let rw = c.rw_lock(name).unwrap();
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while started.elapsed() < seconds {
                        let t = Instant::now();
                        rw.read().unwrap().release().unwrap();
                        mine.push(t.elapsed());
                    }
                    mine
                })
            })
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    })
}

/// The raw cycle on `READERS` raw clients at once for `seconds`.
fn raw_cycles(
    raw: &(dyn Fn(Duration, usize) -> crate::raw::Samples + Send + Sync),
    seconds: Duration,
) -> Vec<Duration> {
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..READERS)
            .map(|i| s.spawn(move || raw(seconds, i + 1).0))
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    })
}

/// Statements a cycle, where the server counts them on demand
/// (PostgreSQL): `cycles` run for a third of the run, counted apart from
/// the timed run (the count's logging slows the server).
fn statements_per_cycle<C>(store: &Store<C>, cycles: &mut dyn FnMut() -> usize) -> Option<V> {
    let count = store.statements.as_ref()?;
    let (statements, cycles) = count(cycles);
    Some(V::N(statements as f64 / cycles.max(1) as f64))
}

fn readers<C: Client>(store: &Store<C>, sizes: &Sizes) {
    let name = store.lock_name("m6-readers");
    let clients: Vec<C> = (0..READERS)
        .map(|_| (store.connect)(Duration::from_secs(10)))
        .collect();
    let served = (store.requests)();
    let meter = Meter::start(store);
    let started = Instant::now();
    let mut samples = read_cycles(&clients, &name, sizes.seconds);
    let elapsed = started.elapsed();
    let per_cycle = requests_per_cycle(store, served, samples.len());
    let work = meter.per_cycle(samples.len());
    let mut figures: Figures = [
        ("case", V::S("readers".into())),
        ("readers", V::N(READERS as f64)),
    ]
    .into_iter()
    .chain(rate_and_latency(&mut samples, elapsed))
    .chain([("server_requests_per_cycle", per_cycle)])
    .chain(work)
    .collect();
    let counted_for = sizes.seconds / 3;
    if let Some(per) = statements_per_cycle(store, &mut || {
        read_cycles(&clients, &name, counted_for).len()
    }) {
        figures.push(("statements_per_cycle", per));
    }
    let raw = store.raw.as_ref().map(|raw| {
        // Its setup (a table, a folder) once, before the clients race.
        raw(Duration::ZERO, 0);
        let served = (store.requests)();
        let meter = Meter::start(store);
        let started = Instant::now();
        let mut all = raw_cycles(raw.as_ref(), sizes.seconds);
        let per_cycle = requests_per_cycle(store, served, all.len());
        let work = meter.per_cycle(all.len());
        let mut figures = rate_and_latency(&mut all, started.elapsed());
        figures.push(("server_requests_per_cycle", per_cycle));
        figures.extend(work);
        if let Some(per) =
            statements_per_cycle(store, &mut || raw_cycles(raw.as_ref(), counted_for).len())
        {
            figures.push(("statements_per_cycle", per));
        }
        figures
    });
    line("M6", store.name, figures, raw, 0);
    for c in clients {
        let _ = c.close();
    }
}

fn writer_handoff<C: Client>(store: &Store<C>, sizes: &Sizes) {
    let name = store.lock_name("m6-writer");
    let (inside, writing, stop) = (
        AtomicUsize::new(0),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    let violations = AtomicU64::new(0);
    let clients: Vec<C> = (0..5)
        .map(|_| (store.connect)(Duration::from_secs(10)))
        .collect();
    let mut waits: Vec<Duration> = std::thread::scope(|s| {
        for c in &clients[1..] {
            let rw = c.rw_lock(&name).unwrap();
            let (inside, writing, stop, violations) = (&inside, &writing, &stop, &violations);
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let g = rw.read().unwrap();
                    inside.fetch_add(1, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().unwrap();
                }
            });
        }
        let rw = clients[0].rw_lock(&name).unwrap();
        let started = Instant::now();
        let mut waits = Vec::new();
        while started.elapsed() < sizes.seconds {
            let t = Instant::now();
            let g = rw.write().unwrap();
            waits.push(t.elapsed());
            writing.store(true, Ordering::SeqCst);
            if inside.load(Ordering::SeqCst) > 0 {
                violations.fetch_add(1, Ordering::SeqCst);
            }
            writing.store(false, Ordering::SeqCst);
            g.release().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        waits
    });
    let figures = vec![
        ("case", V::S("writer_handoff".into())),
        ("readers", V::N(4.0)),
        ("writes", V::N(waits.len() as f64)),
        ("wait_p50_us", V::N(percentile_us(&mut waits, 50.0))),
        ("wait_p99_us", V::N(percentile_us(&mut waits, 99.0))),
    ];
    let seen = violations.load(Ordering::SeqCst);
    line("M6", store.name, figures, None, seen);
    for c in clients {
        let _ = c.close();
    }
}

fn multi_lock<C: Client>(store: &Store<C>, sizes: &Sizes, n: usize) {
    let client = (store.connect)(Duration::from_secs(10));
    let names: Vec<String> = (0..n)
        .map(|i| store.lock_name(&format!("m6-multi-{n}-{i}")))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let multi = client.multi_lock(&refs).unwrap();
    let timed = |cycle: &dyn Fn()| {
        let started = Instant::now();
        let mut samples = Vec::new();
        while started.elapsed() < sizes.seconds {
            let t = Instant::now();
            cycle();
            samples.push(t.elapsed());
        }
        rate_and_latency(&mut samples, started.elapsed())
    };
    let ours = timed(&|| multi.lock().unwrap().release().unwrap());
    let mutexes: Vec<_> = refs.iter().map(|n| client.mutex(n).unwrap()).collect();
    let one_by_one = timed(&|| {
        let held: Vec<_> = mutexes.iter().map(|m| m.lock().unwrap()).collect();
        for g in held.into_iter().rev() {
            g.release().unwrap();
        }
    });
    let case = [
        ("case", V::S("multi_lock".into())),
        ("names", V::N(n as f64)),
    ];
    let figures = case.into_iter().chain(ours).collect();
    line("M6", store.name, figures, Some(one_by_one), 0);
    let _ = client.close();
}
