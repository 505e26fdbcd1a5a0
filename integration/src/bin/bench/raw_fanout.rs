//! M8's raw minimum: `n` raw waiters, each on the store's own change
//! notification, released by one raw request that deletes and notifies;
//! the time from that request's start to each waiter's event. What no
//! barrier can beat on the store: ours adds the waiter's read after its
//! notification and the blocking bridge.
//!
//! - ZooKeeper: an exists-watch per waiter on the node, over as many
//!   sessions as ours (at most 10); its delete fires them.
//! - etcd: a watch per waiter on the key (synced: created before the
//!   delete), over as many connections as ours; its delete.
//! - PostgreSQL: `LISTEN` on a connection per waiter (at most `most`);
//!   one statement deletes a row and `pg_notify`s for it.
//! - Redis: `SUBSCRIBE` on a connection per waiter (as ours: a
//!   subscription is a connection); one script deletes the key and
//!   publishes.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// How long a waiter may wait for its event before the run fails.
const STEP: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Every armed waiter's task reports when its event came; run `release`,
/// then wait for them all: each wake after the release's start.
async fn release_all(
    waiting: Vec<JoinHandle<Instant>>,
    release: impl Future<Output = ()>,
) -> Vec<Duration> {
    let removed = Instant::now();
    release.await;
    let mut woken = Vec::new();
    for w in waiting {
        let at = tokio::time::timeout(STEP, w)
            .await
            .expect("every raw waiter woke")
            .expect("a raw waiter's task");
        woken.push(at.saturating_duration_since(removed));
    }
    woken
}

/// `n` waiters on ZooKeeper over `clients` sessions.
pub fn zk(hosts: &str, n: usize, clients: usize, round: usize) -> Vec<Duration> {
    use zookeeper_client as zk;
    let rt = runtime();
    let node = format!("/bench/raw-fanout-{n}-{round}");
    rt.block_on(async {
        let mut zks = Vec::new();
        for _ in 0..clients {
            zks.push(zk::Client::connect(hosts).await.expect("connect"));
        }
        let open = zk::Acls::anyone_all();
        zks[0]
            .mkdir(&node, &zk::CreateMode::Persistent.with_acls(open))
            .await
            .expect("the raw barrier's node");
        let mut waiting = Vec::new();
        for i in 0..n {
            let (stat, watcher) = zks[i % clients].check_and_watch_stat(&node).await.unwrap();
            assert!(stat.is_some(), "the raw barrier is up");
            waiting.push(tokio::spawn(async move {
                watcher.changed().await;
                Instant::now()
            }));
        }
        let woken = release_all(waiting, async {
            zks[0].delete(&node, None).await.unwrap();
        })
        .await;
        drop(zks);
        woken
    })
}

/// `n` waiters on etcd over `clients` connections.
pub fn etcd(endpoints: &[String], n: usize, clients: usize, round: usize) -> Vec<Duration> {
    use etcd_client::Client;
    let rt = runtime();
    let key = format!("/bench/raw-fanout-{n}-{round}");
    rt.block_on(async {
        let mut etcd = Vec::new();
        for _ in 0..clients {
            etcd.push(Client::connect(endpoints, None).await.expect("connect"));
        }
        etcd[0].put(key.as_str(), "", None).await.unwrap();
        let mut waiting = Vec::new();
        for i in 0..n {
            let mut events = etcd[i % clients].watch(key.as_str(), None).await.unwrap();
            let created = events.message().await.unwrap().expect("the watch runs");
            assert!(created.created(), "the watch's first reply");
            waiting.push(tokio::spawn(async move {
                while let Ok(Some(reply)) = events.message().await {
                    if !reply.events().is_empty() {
                        break;
                    }
                }
                Instant::now()
            }));
        }
        let mut deleting = etcd[0].clone();
        release_all(waiting, async {
            deleting.delete(key.as_str(), None).await.unwrap();
        })
        .await
    })
}

/// `n` waiters on PostgreSQL, each `LISTEN`ing on a connection of its own
/// (at most `most`: the rest are not measured).
pub fn pg(url: &str, n: usize, most: usize, round: usize) -> Vec<Duration> {
    use recipes_pg::tokio_postgres::{connect, AsyncMessage, NoTls};
    let rt = runtime();
    let name = format!("/bench/raw-fanout-{n}-{round}");
    rt.block_on(async {
        let mut waiting = Vec::new();
        let mut listeners = Vec::new();
        for _ in 0..n.min(most) {
            let (client, mut connection) = connect(url, NoTls).await.expect("connect");
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let mut tx = Some(tx);
                while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    match m {
                        Ok(AsyncMessage::Notification(_)) => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(Instant::now());
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    }
                }
            });
            client
                .batch_execute("LISTEN bench_raw_fanout")
                .await
                .unwrap();
            waiting.push(tokio::spawn(async move { rx.await.expect("notified") }));
            listeners.push(client);
        }
        let (client, connection) = connect(url, NoTls).await.expect("connect");
        tokio::spawn(connection);
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS bench_barriers (name text PRIMARY KEY)")
            .await
            .unwrap();
        client
            .execute("INSERT INTO bench_barriers VALUES ($1)", &[&name])
            .await
            .unwrap();
        let remove = "WITH d AS (DELETE FROM bench_barriers WHERE name = $1 RETURNING name) \
                      SELECT pg_notify('bench_raw_fanout', name) FROM d";
        let woken = release_all(waiting, async {
            client.query(remove, &[&name]).await.unwrap();
        })
        .await;
        drop(listeners);
        woken
    })
}

/// `n` waiters on Redis, each subscribed on a connection of its own (a
/// thread each: the client crate's blocking subscription).
pub fn redis(url: &str, n: usize, round: usize) -> Vec<Duration> {
    let (key, channel) = (
        format!("/bench/raw-fanout-{n}-{round}"),
        format!("/bench/raw-fanout-wake-{n}-{round}"),
    );
    let raw = redis::Client::open(url).expect("a Redis URL");
    let mut conn = raw.get_connection().expect("connect");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("1")
        .query(&mut conn)
        .unwrap();
    std::thread::scope(|s| {
        let waiting: Vec<_> = (0..n)
            .map(|_| {
                let (raw, channel) = (raw.clone(), channel.clone());
                s.spawn(move || {
                    let mut conn = raw.get_connection().expect("connect");
                    let mut pubsub = conn.as_pubsub();
                    pubsub.subscribe(&channel).unwrap();
                    pubsub.get_message().expect("a message");
                    Instant::now()
                })
            })
            .collect();
        integration::wait_until("every raw subscriber is there", STEP, || {
            let (_, subscribed): (String, usize) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut conn)
                .unwrap();
            subscribed == n
        });
        let remove = redis::Script::new(
            "redis.call('DEL', KEYS[1]) return redis.call('PUBLISH', ARGV[1], '')",
        );
        let removed = Instant::now();
        let heard: i64 = remove.key(&key).arg(&channel).invoke(&mut conn).unwrap();
        assert_eq!(heard as usize, n, "every subscriber heard");
        waiting
            .into_iter()
            .map(|w| w.join().unwrap().saturating_duration_since(removed))
            .collect()
    })
}
