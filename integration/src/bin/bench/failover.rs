//! M3's raw minimum: one handoff by raw RPCs, timed as M3 times ours —
//! from the moment the holder lets go (a release; or, for a crash, its
//! lease's last renewal on etcd and its session's end on ZooKeeper) to
//! the moment the one waiter behind it learns it holds, from the watch it
//! set before (no read after the wake: it knows it was the only one
//! ahead).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A fresh folder per round, so no round sees another's keys.
fn folder(store: &str) -> String {
    static ROUND: AtomicU64 = AtomicU64::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    format!("/bench/raw-failover-{store}-{round}")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// etcd: A's key on a 2 s lease; B's key behind it and B's deletions watch
/// on the prefix from the revision after its create. A resigns (deletes
/// its key), or its lease runs out (timed from its last renewal).
pub fn etcd(endpoints: &[String], crash: bool) -> Duration {
    use etcd_client::{Client, EventType, PutOptions, WatchFilterType, WatchOptions};
    runtime().block_on(async {
        let prefix = format!("{}/", folder("etcd"));
        let mut a = Client::connect(endpoints, None).await.expect("connect");
        let mut b = Client::connect(endpoints, None).await.expect("connect");
        let a_lease = a.lease_grant(2, None).await.unwrap().id();
        let b_lease = b.lease_grant(10, None).await.unwrap().id();
        let a_key = format!("{prefix}{a_lease:x}");
        let with = |lease| Some(PutOptions::new().with_lease(lease));
        a.put(a_key.as_str(), "", with(a_lease)).await.unwrap();
        let b_key = format!("{prefix}{b_lease:x}");
        let put = b.put(b_key.as_str(), "", with(b_lease)).await.unwrap();
        let from = put.header().unwrap().revision() + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let mut events = b.watch(prefix.as_str(), Some(options)).await.unwrap();
        let created = events.message().await.unwrap().expect("the watch runs");
        assert!(created.created(), "the watch's first reply");
        let deleted = async {
            loop {
                let reply = events.message().await.unwrap().expect("the watch runs");
                let gone = reply.events().iter().any(|e| {
                    e.event_type() == EventType::Delete
                        && e.kv().is_some_and(|kv| kv.key() == a_key.as_bytes())
                });
                if gone {
                    return Instant::now();
                }
            }
        };
        let started;
        let at = if crash {
            let (mut renew, mut acks) = a.lease_keep_alive(a_lease).await.unwrap();
            renew.keep_alive().await.unwrap();
            acks.message().await.unwrap();
            started = Instant::now();
            deleted.await
        } else {
            started = Instant::now();
            let (_, at) = tokio::join!(a.delete(a_key.as_str(), None), deleted);
            at
        };
        let _ = b.lease_revoke(b_lease).await;
        let _ = a.lease_revoke(a_lease).await;
        at.saturating_duration_since(started)
    })
}

/// ZooKeeper: A's ephemeral-sequential node, B's behind it with a watch
/// on A's. A deletes its node, or its session is closed (the server
/// removes its nodes at once, as when a session is killed).
pub fn zk(hosts: &str, crash: bool) -> Duration {
    use zookeeper_client as zk;
    runtime().block_on(async {
        let dir = folder("zk");
        let a = zk::Client::connect(hosts).await.expect("connect");
        let b = zk::Client::connect(hosts).await.expect("connect");
        let open = zk::Acls::anyone_all();
        let folder = zk::CreateMode::Persistent.with_acls(open);
        a.mkdir(&dir, &folder).await.expect("mkdir");
        let node = zk::CreateMode::EphemeralSequential.with_acls(open);
        let prefix = format!("{dir}/n-");
        let (_, seq) = a.create(&prefix, b"", &node).await.unwrap();
        let a_node = format!("{prefix}{seq}");
        let (_, seq) = b.create(&prefix, b"", &node).await.unwrap();
        let b_node = format!("{prefix}{seq}");
        let (stat, watcher) = b.check_and_watch_stat(&a_node).await.unwrap();
        assert!(stat.is_some(), "A's node is there");
        let deleted = async {
            watcher.changed().await;
            Instant::now()
        };
        let started = Instant::now();
        let at = if crash {
            drop(a);
            deleted.await
        } else {
            let (_, at) = tokio::join!(a.delete(&a_node, None), deleted);
            at
        };
        let _ = b.delete(&b_node, None).await;
        let _ = b.delete(&dir, None).await;
        at.saturating_duration_since(started)
    })
}
