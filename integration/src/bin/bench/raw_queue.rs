//! M4's raw minimum: `w` raw waiters queued behind a raw holder over the
//! same number of clients as ours, each waiting for the one entry ahead
//! of its own (etcd: one deletions watch per client, on the prefix;
//! ZooKeeper: a watch per waiter on the node ahead), then a few releases
//! of the head: how many waiters woke and how many requests the server
//! was sent per release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::load::delta;
use crate::out::V;

/// How long one step may take before the measurement counts as failed.
const STEP: Duration = Duration::from_secs(30);

/// The raw queue's per-release figures: wakes, and server requests (`V`
/// as the store's counter gives them).
pub type PerRelease = (Vec<u64>, Vec<V>);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One release's request.
type Release = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// Release the head `releases` times: `release(r)` deletes entry `r`;
/// each time, wait for the waiter behind it (`r + 1`) to report.
fn releases(
    rt: &tokio::runtime::Runtime,
    woken: &AtomicU64,
    heard: &mut mpsc::UnboundedReceiver<usize>,
    requests: &dyn Fn() -> Option<u64>,
    count: usize,
    mut release: impl FnMut(usize) -> Release,
) -> PerRelease {
    let (mut wakes, mut served) = (Vec::new(), Vec::new());
    for r in 0..count {
        let (before, sent) = (woken.load(Ordering::SeqCst), requests());
        rt.block_on(async {
            release(r).await;
            let next = tokio::time::timeout(STEP, heard.recv()).await;
            assert_eq!(next.ok().flatten(), Some(r + 1), "the waiter behind woke");
        });
        wakes.push(woken.load(Ordering::SeqCst) - before);
        served.push(delta(requests(), sent));
    }
    (wakes, served)
}

pub fn etcd(
    endpoints: &[String],
    w: usize,
    clients: usize,
    requests: &dyn Fn() -> Option<u64>,
) -> PerRelease {
    use etcd_client::{Client, EventType, PutOptions, WatchFilterType, WatchOptions};
    let rt = runtime();
    let prefix = format!("/bench/raw-queue-{w}/");
    let woken = Arc::new(AtomicU64::new(0));
    let (tell, mut heard) = mpsc::unbounded_channel();
    let (mut etcd, leases, keys) = rt.block_on(async {
        let mut etcd = Vec::new();
        let mut leases = Vec::new();
        for _ in 0..clients {
            let mut c = Client::connect(endpoints, None).await.expect("connect");
            leases.push(c.lease_grant(60, None).await.unwrap().id());
            etcd.push(c);
        }
        // The holder's key and the waiters', oldest first.
        let mut keys = Vec::new();
        let mut last = 0;
        for i in 0..=w {
            let c = i % clients;
            let key = format!("{prefix}{i:08}");
            let with = Some(PutOptions::new().with_lease(leases[c]));
            let put = etcd[c].put(key.as_str(), "", with).await.unwrap();
            last = put.header().unwrap().revision();
            keys.push((c, key));
        }
        for (c, client) in etcd.iter_mut().enumerate() {
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(last + 1)
                .with_filters([WatchFilterType::NoPut]);
            let mut events = client.watch(prefix.as_str(), Some(options)).await.unwrap();
            let created = events.message().await.unwrap().expect("the watch runs");
            assert!(created.created(), "the watch's first reply");
            let (keys, woken, tell) = (keys.clone(), woken.clone(), tell.clone());
            tokio::spawn(async move {
                while let Ok(Some(reply)) = events.message().await {
                    for e in reply.events() {
                        let Some(kv) = e.kv() else { continue };
                        let gone = keys.iter().position(|(_, k)| k.as_bytes() == kv.key());
                        let Some(ahead) = gone.filter(|_| e.event_type() == EventType::Delete)
                        else {
                            continue;
                        };
                        // The waiter behind it, if it is this client's.
                        if keys.get(ahead + 1).is_some_and(|(owner, _)| *owner == c) {
                            woken.fetch_add(1, Ordering::SeqCst);
                            let _ = tell.send(ahead + 1);
                        }
                    }
                }
            });
        }
        (etcd, leases, keys)
    });
    let per_release = releases(&rt, &woken, &mut heard, requests, 3.min(w), |r| {
        let (c, key) = keys[r].clone();
        let mut client = etcd[c].clone();
        Box::pin(async move {
            client.delete(key, None).await.unwrap();
        })
    });
    rt.block_on(async {
        for (c, lease) in leases.iter().enumerate() {
            let _ = etcd[c].lease_revoke(*lease).await;
        }
    });
    per_release
}

pub fn zk(hosts: &str, w: usize, clients: usize, requests: &dyn Fn() -> Option<u64>) -> PerRelease {
    use zookeeper_client as zk;
    let rt = runtime();
    let dir = format!("/bench/raw-queue-{w}");
    let woken = Arc::new(AtomicU64::new(0));
    let (tell, mut heard) = mpsc::unbounded_channel();
    let (zks, nodes) = rt.block_on(async {
        let mut zks = Vec::new();
        for _ in 0..clients {
            zks.push(zk::Client::connect(hosts).await.expect("connect"));
        }
        let open = zk::Acls::anyone_all();
        zks[0]
            .mkdir(&dir, &zk::CreateMode::Persistent.with_acls(open))
            .await
            .expect("mkdir");
        let node = zk::CreateMode::EphemeralSequential.with_acls(open);
        let prefix = format!("{dir}/n-");
        let mut nodes = Vec::new();
        for i in 0..=w {
            let (_, seq) = zks[i % clients].create(&prefix, b"", &node).await.unwrap();
            nodes.push(format!("{prefix}{seq}"));
        }
        for i in 1..=w {
            let (stat, watcher) = zks[i % clients]
                .check_and_watch_stat(&nodes[i - 1])
                .await
                .unwrap();
            assert!(stat.is_some(), "the node ahead is there");
            let (woken, tell) = (woken.clone(), tell.clone());
            tokio::spawn(async move {
                if watcher.changed().await.event_type == zk::EventType::NodeDeleted {
                    woken.fetch_add(1, Ordering::SeqCst);
                    let _ = tell.send(i);
                }
            });
        }
        (zks, nodes)
    });
    let per_release = releases(&rt, &woken, &mut heard, requests, 3.min(w), |r| {
        let (client, node) = (zks[r % clients].clone(), nodes[r].clone());
        Box::pin(async move {
            client.delete(&node, None).await.unwrap();
        })
    });
    // The sessions' close runs on the runtime; it takes their nodes along.
    let _inside = rt.enter();
    drop(zks);
    per_release
}
