//! M5's raw minimum: one raw client holding `n` keys or nodes at once —
//! etcd: `n` keys on one lease, kept alive by one keep-alive stream;
//! ZooKeeper: `n` ephemeral nodes on one session — on a runtime in the
//! calling thread (no thread of its own), timed and measured as M5
//! measures ours.

use std::time::{Duration, Instant};

use crate::out::{Figures, V};

/// How M5 reads this process and the server.
pub struct Probe<'a> {
    /// This process's threads and resident memory (KiB).
    pub threads_and_rss: fn() -> (u64, u64),
    /// The server's requests so far, where it counts them.
    pub requests: &'a dyn Fn() -> Option<u64>,
    /// How long to stay idle while holding.
    pub idle: Duration,
}

/// A raw holder of many: what it takes and how it idles.
pub type RawHeld = dyn Fn(usize, &Probe<'_>) -> Figures;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// M5's figures of a raw holder that took `n` in `acquire_all` and held
/// them while `idle` ran (the holder's runtime driving its keep-alives or
/// heartbeats meanwhile).
fn figures(
    n: usize,
    acquire_all: Duration,
    before: (u64, u64),
    probe: &Probe<'_>,
    idle: impl FnOnce(),
) -> Figures {
    let (threads, rss) = (probe.threads_and_rss)();
    let served = (probe.requests)();
    idle();
    let per_sec = match ((probe.requests)(), served) {
        (Some(after), Some(before)) => {
            V::N(after.saturating_sub(before) as f64 / probe.idle.as_secs_f64())
        }
        _ => V::Null,
    };
    vec![
        ("acquire_all_ms", V::N(acquire_all.as_secs_f64() * 1e3)),
        (
            "per_acquisition_us",
            V::N(acquire_all.as_secs_f64() * 1e6 / n as f64),
        ),
        (
            "threads_added",
            V::N(threads.saturating_sub(before.0) as f64),
        ),
        (
            "kib_per_lock",
            V::N(rss.saturating_sub(before.1) as f64 / n as f64),
        ),
        ("idle_server_requests_per_sec", per_sec),
    ]
}

pub fn etcd(endpoints: &[String], n: usize, probe: &Probe<'_>) -> Figures {
    use etcd_client::{Client, PutOptions};
    let rt = runtime();
    let before = (probe.threads_and_rss)();
    let mut raw = rt
        .block_on(Client::connect(endpoints, None))
        .expect("connect");
    let lease = rt.block_on(raw.lease_grant(10, None)).unwrap().id();
    let (mut renew, mut acks) = rt.block_on(raw.lease_keep_alive(lease)).unwrap();
    // A renewal every third of the TTL, as a client's keep-alive, whenever
    // the runtime runs (while taking the keys and while idle).
    rt.spawn(async move {
        let period = Duration::from_secs(10) / 3;
        loop {
            tokio::time::sleep(period).await;
            if renew.keep_alive().await.is_err() || acks.message().await.is_err() {
                return;
            }
        }
    });
    let started = Instant::now();
    rt.block_on(async {
        for i in 0..n {
            let with = Some(PutOptions::new().with_lease(lease));
            raw.put(format!("/bench/raw-held/{n}/{i}"), "", with)
                .await
                .unwrap();
        }
    });
    let acquire_all = started.elapsed();
    let out = figures(n, acquire_all, before, probe, || {
        rt.block_on(async { tokio::time::sleep(probe.idle).await });
    });
    rt.block_on(raw.lease_revoke(lease)).unwrap();
    out
}

pub fn zk(hosts: &str, n: usize, probe: &Probe<'_>) -> Figures {
    use zookeeper_client as zk;
    let rt = runtime();
    let before = (probe.threads_and_rss)();
    let raw = rt.block_on(zk::Client::connect(hosts)).expect("connect");
    let open = zk::Acls::anyone_all();
    let dir = format!("/bench/raw-held-{n}");
    rt.block_on(raw.mkdir(&dir, &zk::CreateMode::Persistent.with_acls(open)))
        .expect("mkdir");
    let options = zk::CreateMode::EphemeralSequential.with_acls(open);
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            raw.create(&format!("{dir}/n-"), b"", &options)
                .await
                .unwrap();
        }
    });
    let acquire_all = started.elapsed();
    // The client's own task sends the heartbeats while the runtime runs.
    let out = figures(n, acquire_all, before, probe, || {
        rt.block_on(async { tokio::time::sleep(probe.idle).await });
    });
    // The session's close runs on the runtime.
    let _inside = rt.enter();
    drop(raw);
    out
}
