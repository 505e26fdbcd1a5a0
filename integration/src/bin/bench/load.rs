//! M4 (many waiters on one lock) and M5 (many locks held by one client).

use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use integration::wait_until;
use recipes_core::store::engine::queue_reads;
use recipes_core::Client;

use crate::measures::{Sizes, Store};
use crate::out::{line, Figures, V};
use crate::raw_held::Probe;

/// Clients the waiters of M4 are spread over.
const CLIENTS: usize = 10;

pub fn delta(after: Option<u64>, before: Option<u64>) -> V {
    match (after, before) {
        (Some(a), Some(b)) => V::N(a.saturating_sub(b) as f64),
        _ => V::Null,
    }
}

/// Wakes and server requests per release, as M4 prints them.
fn per_release(wakes: &[u64], requests: &[V]) -> Figures {
    let requests: Vec<i64> = requests
        .iter()
        .map(|v| match v {
            V::N(x) => *x as i64,
            _ => -1,
        })
        .collect();
    vec![
        ("wakes_per_release", V::S(format!("{wakes:?}"))),
        ("server_requests_per_release", V::S(format!("{requests:?}"))),
    ]
}

/// M4: `w` waiters queued on one lock (over [`CLIENTS`] clients); for
/// each of a few releases, how many waiters read the queue again (wakes:
/// 1 is no herd) and how many requests the server served meanwhile.
pub fn m4<C: Client>(store: &Store<C>, sizes: &Sizes) {
    for &w in sizes.waiters {
        if !store.fits("M4", "waiters", w) {
            continue;
        }
        let name = store.lock_name(&format!("m4-{w}"));
        let clients: Vec<C> = (0..CLIENTS.min(w))
            .map(|_| (store.connect)(Duration::from_secs(10)))
            .collect();
        let holder = clients[0].mutex(&name).unwrap().lock().unwrap();
        let (acquired, heard) = unbounded::<Sender<()>>();
        let waiters: Vec<_> = (0..w)
            .map(|i| {
                let mutex = clients[i % clients.len()].mutex(&name).unwrap();
                let acquired = acquired.clone();
                std::thread::spawn(move || {
                    // Closing the clients ends the waits that are left.
                    if let Ok(g) = mutex.lock() {
                        let (go, release) = unbounded();
                        let _ = acquired.send(go);
                        let _ = release.recv();
                        let _ = g.release();
                    }
                })
            })
            .collect();
        wait_until(
            &format!("{w} waiters queue"),
            Duration::from_secs(120),
            || clients[0].contenders(&name).unwrap().len() > w,
        );
        // Queued is not yet waiting: give each waiter time to finish its
        // first read. No store shows that, and the engine counts no read
        // for a first listing that came with the entry (etcd), so a settle
        // time it is; a late waiter only shows as 2 wakes, not as a
        // violation.
        std::thread::sleep(Duration::from_millis(200));
        let (mut wakes, mut requests) = (Vec::new(), Vec::new());
        let mut release: Box<dyn FnOnce()> = Box::new(move || holder.release().unwrap());
        for _ in 0..3.min(w) {
            let (reads, served) = (queue_reads(), (store.requests)());
            release();
            let go = heard
                .recv_timeout(Duration::from_secs(60))
                .expect("a waiter acquires");
            wakes.push(queue_reads() - reads);
            requests.push(delta((store.requests)(), served));
            release = Box::new(move || {
                let _ = go.send(());
            });
        }
        release();
        // Whoever acquires from now on finds no one to tell and gives it
        // back at once: the buffered senders go with the receiver.
        drop(heard);
        let mut figures = vec![("waiters", V::N(w as f64))];
        figures.extend(per_release(&wakes, &requests));
        let n = clients.len();
        for c in clients {
            let _ = c.close_within(Duration::from_secs(5));
        }
        for t in waiters {
            let _ = t.join();
        }
        // After ours is all gone: the server counts only the raw queue.
        let raw = store.raw_queue.as_ref().map(|raw| {
            let (wakes, requests) = raw(w, n, &store.requests);
            per_release(&wakes, &requests)
        });
        // One wake per release is a target, not a safety property: figures.
        line("M4", store.name, figures, raw, 0);
    }
}

/// This process's threads and resident memory (KiB), from /proc.
fn threads_and_rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

/// The server requests served while `idle` passes: the statements its
/// log shows where the store counts those (PostgreSQL, whose statistics
/// lag), else the server's own count.
fn idle_requests<C: Client>(store: &Store<C>, idle: Duration) -> V {
    if let Some(count) = &store.statements {
        let (statements, _) = count(&mut || {
            std::thread::sleep(idle);
            0
        });
        return V::N(statements as f64);
    }
    let served = (store.requests)();
    std::thread::sleep(idle);
    delta((store.requests)(), served)
}

/// M5: `n` distinct locks held by one client: the time to take them all,
/// threads, resident memory per held lock, and the server requests per
/// second while they are held and idle (keep-alives, heartbeats;
/// PostgreSQL's: statements).
pub fn m5<C: Client>(store: &Store<C>, sizes: &Sizes) {
    for &n in sizes.held {
        if !store.fits("M5", "held", n) {
            continue;
        }
        let client = (store.connect)(Duration::from_secs(10));
        let (_, rss_before) = threads_and_rss();
        let started = Instant::now();
        let guards: Vec<_> = (0..n)
            .map(|i| {
                client
                    .mutex(&store.lock_name(&format!("m5-{n}/{i}")))
                    .unwrap()
                    .lock()
                    .unwrap()
            })
            .collect();
        let acquire_all = started.elapsed();
        let (threads, rss) = threads_and_rss();
        let idle_requests = idle_requests(store, sizes.idle);
        let per_sec = match idle_requests {
            V::N(x) => V::N(x / sizes.idle.as_secs_f64()),
            other => other,
        };
        let lost = guards.iter().filter(|g| g.check().is_err()).count() as u64;
        let started = Instant::now();
        for g in guards {
            g.release().unwrap();
        }
        let figures = vec![
            ("held", V::N(n as f64)),
            ("acquire_all_ms", V::N(acquire_all.as_secs_f64() * 1e3)),
            (
                "per_acquisition_us",
                V::N(acquire_all.as_secs_f64() * 1e6 / n as f64),
            ),
            (
                "release_all_ms",
                V::N(started.elapsed().as_secs_f64() * 1e3),
            ),
            ("threads", V::N(threads as f64)),
            (
                "kib_per_lock",
                V::N(rss.saturating_sub(rss_before) as f64 / n as f64),
            ),
            ("idle_server_requests_per_sec", per_sec),
        ];
        let raw = store.raw_held.as_ref().map(|raw| {
            let probe = Probe {
                threads_and_rss,
                requests: &store.requests,
                idle: sizes.idle,
            };
            raw(n, &probe)
        });
        line("M5", store.name, figures, raw, lost);
        let _ = client.close();
    }
}
