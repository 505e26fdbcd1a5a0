//! Benchmarks against real servers with fsync on, each compared in the same
//! run with the raw RPCs a lock needs at minimum. Prints one JSON object per
//! line.
//!
//! ```sh
//! cargo run --release -p integration --bin bench -- [zk|etcd|redis|pg|all] [seconds]
//! ```
//!
//! Cases: `raw` (the minimum RPCs of an uncontended lock and release —
//! ZooKeeper: create, list children, delete; etcd: the acquire txn and a
//! delete; Redis: `SET NX PX`, `INCR` of the fence, compare-and-delete by
//! `EVAL` — issued straight through the client crate), `uncontended` (our
//! `lock` + `release` on a free lock), `contended` (two clients handing one
//! lock back and forth). PostgreSQL runs both modes (`bench/pg.rs`).

#[path = "bench/pg.rs"]
mod pg;

use recipes_core::Client as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{EtcdConfig, EtcdServer, RedisConfig, RedisServer, ZkConfig, ZkServer};
use recipes_etcd::EtcdClient;
use recipes_redis::RedisClient;
use recipes_zk::ZkClient;

fn report(backend: &str, case: &str, ops: u64, elapsed: Duration) {
    let per_sec = ops as f64 / elapsed.as_secs_f64();
    let mean_us = elapsed.as_secs_f64() * 1e6 / ops.max(1) as f64;
    println!(
        "{{\"backend\":\"{backend}\",\"case\":\"{case}\",\"ops\":{ops},\"seconds\":{:.3},\"per_sec\":{per_sec:.1},\"mean_us\":{mean_us:.1}}}",
        elapsed.as_secs_f64()
    );
}

/// Run `op` for `seconds`; count the operations.
fn timed(seconds: Duration, mut op: impl FnMut()) -> (u64, Duration) {
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < seconds {
        op();
        n += 1;
    }
    (n, started.elapsed())
}

/// Two threads taking turns on one lock; total acquisitions.
fn contended<F>(seconds: Duration, make: F) -> (u64, Duration)
where
    F: Fn() -> Box<dyn FnMut() + Send>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (stop, count, mut cycle) = (stop.clone(), count.clone(), make());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    cycle();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(seconds);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    (count.load(Ordering::Relaxed), started.elapsed())
}

fn zk(seconds: Duration) {
    let server = ZkServer::start_with(ZkConfig::default().with_fsync(true));
    let hosts = server.connect_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let raw = rt
        .block_on(zookeeper_client::Client::connect(&hosts))
        .unwrap();
    let options = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    rt.block_on(raw.mkdir(
        "/bench/raw",
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    ))
    .unwrap();
    // One async loop: the client's session task runs throughout, as ours
    // does on its runtime thread.
    let (n, t) = rt.block_on(async {
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < seconds {
            let (_, seq) = raw.create("/bench/raw/n-", b"", &options).await.unwrap();
            raw.list_children("/bench/raw").await.unwrap();
            raw.delete(&format!("/bench/raw/n-{seq}"), None)
                .await
                .unwrap();
            n += 1;
        }
        (n, started.elapsed())
    });
    report("zk", "raw create+list+delete", n, t);

    let client = ZkClient::connect(hosts.clone()).unwrap();
    let mutex = client.mutex("/bench/uncontended").unwrap();
    let (n, t) = timed(seconds, || mutex.lock().unwrap().release().unwrap());
    report("zk", "uncontended lock+release", n, t);

    let (n, t) = contended(seconds, || {
        let m = ZkClient::connect(hosts.clone())
            .unwrap()
            .mutex("/bench/contended")
            .unwrap();
        Box::new(move || m.lock().unwrap().release().unwrap())
    });
    report("zk", "contended handoff, 2 clients", n, t);
}

fn etcd(seconds: Duration) {
    let server = EtcdServer::start_with(EtcdConfig::default().with_fsync(true));
    let endpoints = server.endpoints();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut raw = rt
        .block_on(etcd_client::Client::connect(&endpoints, None))
        .unwrap();
    let lease = rt.block_on(raw.lease_grant(10, None)).unwrap().id();
    let key = format!("/bench/raw/{lease:x}");
    let (n, t) = rt.block_on(async {
        use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < seconds {
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease))),
                    TxnOp::get(
                        "/bench/raw/",
                        Some(GetOptions::new().with_prefix().with_limit(1)),
                    ),
                ]);
            raw.txn(txn).await.unwrap();
            raw.delete(key.as_str(), None).await.unwrap();
            n += 1;
        }
        (n, started.elapsed())
    });
    report("etcd", "raw acquire-txn+delete", n, t);

    let client = EtcdClient::connect(endpoints.clone()).unwrap();
    let mutex = client.mutex("/bench/uncontended").unwrap();
    let (n, t) = timed(seconds, || mutex.lock().unwrap().release().unwrap());
    report("etcd", "uncontended lock+release", n, t);

    let (n, t) = contended(seconds, || {
        let m = EtcdClient::connect(endpoints.clone())
            .unwrap()
            .mutex("/bench/contended")
            .unwrap();
        Box::new(move || m.lock().unwrap().release().unwrap())
    });
    report("etcd", "contended handoff, 2 clients", n, t);
}

/// Redis with `appendfsync always`: every write on disk before its reply.
fn redis(seconds: Duration) {
    let server = RedisServer::start_with(RedisConfig {
        aof: Some("always"),
        ..RedisConfig::default()
    });
    let raw = redis::Client::open(server.url()).unwrap();
    let mut conn = raw.get_connection().unwrap();
    let release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let (n, t) = timed(seconds, || {
        let set: Option<String> = redis::cmd("SET")
            .arg("/bench/raw")
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut conn)
            .unwrap();
        assert!(set.is_some());
        let _: i64 = redis::cmd("INCR")
            .arg("/bench/raw-fence")
            .query(&mut conn)
            .unwrap();
        let _: i64 = release
            .key("/bench/raw")
            .arg("token")
            .invoke(&mut conn)
            .unwrap();
    });
    report("redis", "raw SET NX PX+INCR+compare-and-delete", n, t);

    let client = RedisClient::connect(server.url()).unwrap();
    let mutex = client.mutex("/bench/uncontended").unwrap();
    let (n, t) = timed(seconds, || mutex.lock().unwrap().release().unwrap());
    report("redis", "uncontended lock+release", n, t);

    let url = server.url();
    let (n, t) = contended(seconds, || {
        let m = RedisClient::connect(url.as_str())
            .unwrap()
            .mutex("/bench/contended")
            .unwrap();
        Box::new(move || m.lock().unwrap().release().unwrap())
    });
    report("redis", "contended handoff, 2 clients", n, t);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("all");
    let seconds = Duration::from_secs(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3));
    match which {
        "zk" => zk(seconds),
        "etcd" => etcd(seconds),
        "redis" => redis(seconds),
        "pg" => pg::pg(seconds),
        "all" => {
            zk(seconds);
            etcd(seconds);
            redis(seconds);
            pg::pg(seconds);
        }
        other => {
            eprintln!("bench: unknown backend {other:?}; use zk, etcd, redis, pg or all");
            std::process::exit(64);
        }
    }
}
